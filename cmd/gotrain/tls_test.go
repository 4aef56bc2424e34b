package main

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/distributed/store"
	"github.com/gotrain/gotrain/distributed/tlsconf"
)

// tlsDir runs `gotrain tls init` for hosts and returns the directory.
func tlsDir(t *testing.T, hosts string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tls")
	out, _, code := runGotrain(t, 30*time.Second, "tls", "init", dir, "--hosts", hosts)
	if code != 0 {
		t.Fatalf("gotrain tls init: exit %d:\n%s", code, out)
	}
	return dir
}

func TestTLSInit(t *testing.T) {
	dir := tlsDir(t, "node0:2,alice@node1,10.0.0.9")
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca.pem holds no certificate")
	}
	for _, h := range []string{"node0", "node1", "10.0.0.9"} {
		b, err := os.ReadFile(filepath.Join(dir, h+".pem"))
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(b)
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots, DNSName: h, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s.pem: %v", h, err)
		}
		if d := time.Until(c.NotAfter); d < 364*24*time.Hour || d > 366*24*time.Hour {
			t.Errorf("%s.pem is valid for another %v, want the default year", h, d)
		}
		fi, err := os.Stat(filepath.Join(dir, h+"-key.pem"))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s-key.pem: %v, mode %v; want mode 0600", h, err, fi.Mode().Perm())
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "ca-key.pem")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("ca-key.pem: %v; want mode 0600", err)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"tls", "init", dir, "--hosts", "node2"}, "ca.pem exists: not overwriting it"},
		{[]string{"tls", "init", dir + "2", "--hosts", "a,,b"}, `--hosts a,,b: empty host name`},
		{[]string{"tls", "init", dir + "2", "--hosts", "a,a"}, `host "a" is listed twice`},
		{[]string{"tls", "init", dir + "2", "--hosts", "a;b"}, `host "a;b" is neither a host name nor an IP address`},
		{[]string{"tls", "init", dir + "2", "--hosts", "a", "--days", "0"}, `--days 0: must be at least 1`},
		{[]string{"tls", "init", dir + "2"}, `--hosts is required`},
		{[]string{"tls", "init", "--hosts", "a"}, `want one DIR argument`},
		{[]string{"tls", "frobnicate"}, `frobnicate`},
	} {
		out, _, code := runGotrain(t, 30*time.Second, tc.args...)
		if code != exitUsage || !strings.Contains(out, tc.want) || strings.Count(strings.TrimSpace(out), "\n") != 0 {
			t.Errorf("gotrain %s: exit %d, output:\n%s\nwant exit %d and one line with %q", strings.Join(tc.args, " "), code, out, exitUsage, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "node2.pem")); err == nil {
		t.Error("a refused tls init wrote node2.pem")
	}
}

// TestTLSFlagsRefused: TLS flags that cannot work are refused with one
// line before any worker starts.
func TestTLSFlagsRefused(t *testing.T) {
	dir := tlsDir(t, "node0,node1")
	other := tlsDir(t, "node0")
	ca := filepath.Join(dir, "ca.pem")
	t.Setenv(tokenEnv, "tok") // gotrain store needs one before it reads its TLS files
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--tls-ca", ca, "--", "true"}, "--tls-cert (GOTRAIN_TLS_CERT) and --tls-key (GOTRAIN_TLS_KEY) not set"},
		{[]string{"run", "--tls-ca", ca, "--tls-cert", filepath.Join(dir, "node0.pem"), "--tls-key", filepath.Join(dir, "node1-key.pem"), "--", "true"},
			"private key does not match public key"},
		{[]string{"run", "--tls-ca", ca, "--tls-cert", filepath.Join(other, "node0.pem"), "--tls-key", filepath.Join(other, "node0-key.pem"), "--", "true"},
			"does not verify against the CA " + ca},
		{[]string{"store", "--addr", "127.0.0.1:0", "--tls-ca", ca, "--tls-cert", filepath.Join(dir, "gone.pem"), "--tls-key", filepath.Join(dir, "node0-key.pem")},
			"gone.pem: no such file"},
	} {
		out, _, code := runGotrain(t, 30*time.Second, tc.args...)
		if code != exitUsage || !strings.Contains(out, tc.want) || strings.Count(strings.TrimSpace(out), "\n") != 0 {
			t.Errorf("gotrain %s: exit %d, output:\n%s\nwant exit %d and one line with %q", strings.Join(tc.args, " "), code, out, exitUsage, tc.want)
		}
	}
}

// TestBenchAllreduceTLS: three workers allreduce over mutual TLS with
// per-host certificates named by the {host} pattern; the benchmark
// names the cipher suite.
func TestBenchAllreduceTLS(t *testing.T) {
	dir := tlsDir(t, "node0")
	t.Setenv("GOTRAIN_SHM", "0") // every byte over the TLS connections
	t.Setenv(tlsconf.EnvHost, "node0")
	out, stdout, code := runGotrain(t, 60*time.Second, "bench", "allreduce", "--nproc", "3", "--sizes", "4096,1048580", "--algo", "ring",
		"--tls-ca", filepath.Join(dir, "ca.pem"), "--tls-cert", filepath.Join(dir, "{host}.pem"), "--tls-key", filepath.Join(dir, "{host}-key.pem"))
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	if !regexp.MustCompile(`bench: data plane over TLS 1\.3 TLS_(AES_128_GCM_SHA256|AES_256_GCM_SHA384|CHACHA20_POLY1305_SHA256)`).MatchString(out) {
		t.Errorf("no cipher suite named:\n%s", out)
	}
	for _, size := range []string{"4096", "1048580"} {
		if !strings.Contains(stdout, "op=allreduce world=3 bytes="+size+" ") {
			t.Errorf("no result for %s bytes:\n%s", size, stdout)
		}
	}
}

// TestStoreCommandTLS: `gotrain store --tls-*` serves clients with a
// certificate of its CA and refuses a plain one with a line saying so.
func TestStoreCommandTLS(t *testing.T) {
	dir := tlsDir(t, "server,client")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := gotrainCmd(ctx, t, "store", "--addr", "127.0.0.1:0", "--tls-ca", filepath.Join(dir, "ca.pem"),
		"--tls-cert", filepath.Join(dir, "server.pem"), "--tls-key", filepath.Join(dir, "server-key.pem"))
	cmd.Env = append(cmd.Env, tokenEnv+"=tok")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	m := regexp.MustCompile(`listening on (\S+)`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("no address printed: %q, %v", line, err)
	}
	client, err := tlsconf.Load(tlsconf.Files{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "client.pem"), Key: filepath.Join(dir, "client-key.pem")})
	if err != nil {
		t.Fatal(err)
	}
	c, err := store.Dial(ctx, m[1], []byte("tok"), store.WithTLS(client))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	c.Close()
	_, err = store.Dial(ctx, m[1], []byte("tok"))
	if err == nil || !strings.Contains(err.Error(), "uses TLS and this process does not") {
		t.Errorf("plain client: %v, want a refusal saying the store uses TLS", err)
	}
}
