package tlsconf

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// cluster makes a CA and certificates for hosts in a new directory.
func cluster(t testing.TB, hosts ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tls")
	if err := Generate(dir, hosts, time.Hour); err != nil {
		t.Fatal(err)
	}
	return dir
}

func files(dir, host string) Files {
	return Files{CA: filepath.Join(dir, CAFile), Cert: filepath.Join(dir, CertFile(host)), Key: filepath.Join(dir, KeyFile(host))}
}

func load(t testing.TB, f Files) *Config {
	t.Helper()
	c, err := Load(f)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		t.Fatalf("%s holds no PEM certificate", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestGenerate(t *testing.T) {
	dir := cluster(t, "node0", "10.0.0.2", "fd00::3")
	ca := readCert(t, filepath.Join(dir, CAFile))
	if !ca.IsCA || !ca.BasicConstraintsValid {
		t.Errorf("ca.pem is not a CA certificate")
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	for _, tc := range []struct {
		host string
		dns  []string
		ips  []string
	}{{"node0", []string{"node0"}, nil}, {"10.0.0.2", nil, []string{"10.0.0.2"}}, {"fd00::3", nil, []string{"fd00::3"}}} {
		c := readCert(t, filepath.Join(dir, CertFile(tc.host)))
		for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
				t.Errorf("%s: does not verify against the CA for usage %v: %v", tc.host, u, err)
			}
		}
		if !slices.Equal(c.DNSNames, tc.dns) {
			t.Errorf("%s: DNS SANs %v, want %v", tc.host, c.DNSNames, tc.dns)
		}
		var ips []string
		for _, ip := range c.IPAddresses {
			ips = append(ips, ip.String())
		}
		if !slices.Equal(ips, tc.ips) {
			t.Errorf("%s: IP SANs %v, want %v", tc.host, ips, tc.ips)
		}
		if err := c.VerifyHostname(tc.host); err != nil {
			t.Errorf("%s: %v", tc.host, err)
		}
		if d := c.NotAfter.Sub(time.Now()); d > time.Hour || d < 50*time.Minute {
			t.Errorf("%s: valid for another %v, want about an hour", tc.host, d)
		}
		// Every host's files load as a TLS set-up.
		load(t, files(dir, tc.host))
	}
	for _, f := range []string{CAKeyFile, KeyFile("node0"), KeyFile("10.0.0.2")} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", f, fi.Mode().Perm())
		}
	}
	// A second run overwrites nothing, not even the files it would make
	// anew.
	before, _ := os.ReadFile(filepath.Join(dir, CAFile))
	err := Generate(dir, []string{"node9"}, time.Hour)
	if err == nil || !strings.Contains(err.Error(), "ca.pem exists") {
		t.Fatalf("Generate over an existing directory: %v, want a refusal naming ca.pem", err)
	}
	after, _ := os.ReadFile(filepath.Join(dir, CAFile))
	if string(before) != string(after) {
		t.Error("ca.pem changed")
	}
	if _, err := os.Stat(filepath.Join(dir, CertFile("node9"))); err == nil {
		t.Error("node9.pem was written")
	}
}

func TestParseHosts(t *testing.T) {
	got, err := ParseHosts("node0:2, alice@node1,10.0.0.3,[fd00::1],fd00::2")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"node0", "node1", "10.0.0.3", "fd00::1", "fd00::2"}; !slices.Equal(got, want) {
		t.Errorf("ParseHosts = %v, want %v", got, want)
	}
	for list, want := range map[string]string{
		"a,,b":  `empty host name`,
		"a,a:4": `host "a" is listed twice`,
		"a/b":   `host "a/b" is neither`,
		"..":    `host ".." is neither`,
		"-x":    `host "-x" is neither`,
	} {
		_, err := ParseHosts(list)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("ParseHosts(%q) = %v, want one line with %q", list, err, want)
		}
	}
}

func TestLoadRefuses(t *testing.T) {
	dir := cluster(t, "a", "b")
	other := cluster(t, "a")
	good := files(dir, "a")
	for name, tc := range map[string]struct {
		f    Files
		want string
	}{
		"no key":         {Files{CA: good.CA, Cert: good.Cert}, "--tls-key (GOTRAIN_TLS_KEY) not set"},
		"only CA":        {Files{CA: good.CA}, "--tls-cert (GOTRAIN_TLS_CERT) and --tls-key (GOTRAIN_TLS_KEY) not set"},
		"missing file":   {Files{CA: good.CA, Cert: good.Cert + ".gone", Key: good.Key}, "a.pem.gone: no such file"},
		"CA not PEM":     {Files{CA: good.Key + "x", Cert: good.Cert, Key: good.Key}, "no such file"},
		"key of another": {Files{CA: good.CA, Cert: good.Cert, Key: files(dir, "b").Key}, "private key does not match public key"},
		"other CA":       {Files{CA: good.CA, Cert: files(other, "a").Cert, Key: files(other, "a").Key}, "does not verify against the CA"},
		"key as CA":      {Files{CA: good.Key, Cert: good.Cert, Key: good.Key}, "holds no PEM certificate"},
	} {
		_, err := Load(tc.f)
		if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Load = %v, want ErrConfig with %q", name, err, tc.want)
		}
	}
}

func TestFromEnvExpand(t *testing.T) {
	env := map[string]string{EnvCA: " /tls/ca.pem ", EnvCert: "/tls/{host}.pem", EnvKey: "/tls/{host}-key.pem", EnvHost: "node7"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	f := FromEnv(lookup).Expand(HostName(lookup))
	if want := (Files{CA: "/tls/ca.pem", Cert: "/tls/node7.pem", Key: "/tls/node7-key.pem"}); f != want {
		t.Errorf("FromEnv+Expand = %+v, want %+v", f, want)
	}
	if FromEnv(func(string) (string, bool) { return "", false }).Enabled() {
		t.Error("no variables: TLS enabled")
	}
	c, err := LoadEnv(func(string) (string, bool) { return "", false })
	if c != nil || err != nil {
		t.Errorf("LoadEnv without variables = %v, %v; want nil, nil", c, err)
	}
}

// handshake runs a TLS server (srv) and client (cli) over loopback TCP,
// each followed by one byte from the server to the client (as the token
// handshake's first read), and returns each side's error. A nil side
// speaks plain TCP.
func handshake(t *testing.T, srv, cli *Config) (serr, cerr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		var conn net.Conn = c
		if srv != nil {
			tc, err := srv.ServerConn(ctx, c, "client", func(nc net.Conn) error {
				_, err := nc.Write([]byte("plain answer"))
				return err
			})
			if err != nil {
				done <- err
				return
			}
			conn = tc
		}
		msg := []byte{1}
		if srv == nil {
			// As the token handshake answers a TLS client: a plain frame.
			msg = []byte("plain answer")
		}
		_, err = conn.Write(msg)
		if err == nil {
			// Wait for the client's verdict (TLS 1.3 sends it after the
			// server's handshake completed).
			_, err = conn.Read(make([]byte, 1))
			if err == io.EOF {
				err = nil
			}
		}
		done <- Explain(err, "client")
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var conn net.Conn = c
	if cli != nil {
		tc, err := cli.ClientConn(ctx, c, "server")
		if err != nil {
			c.Close()
			return <-done, err
		}
		conn = tc
	} else {
		c.Write([]byte("GTRN plain hello\n"))
	}
	_, err = conn.Read(make([]byte, 1))
	cerr = Explain(err, "server")
	c.Close()
	return <-done, cerr
}

func TestHandshakes(t *testing.T) {
	dir := cluster(t, "a", "b")
	other := cluster(t, "a")
	a, b := load(t, files(dir, "a")), load(t, files(dir, "b"))
	// A set-up trusting this CA whose certificate another CA signed: its
	// peers refuse it.
	stranger := load(t, files(other, "a"))

	if serr, cerr := handshake(t, a, b); serr != nil || cerr != nil {
		t.Fatalf("same CA: server %v, client %v", serr, cerr)
	}
	if got := Negotiated(); !strings.HasPrefix(got, "TLS 1.3 TLS_") {
		t.Errorf("Negotiated() = %q, want TLS 1.3 and a suite", got)
	}

	for name, tc := range map[string]struct {
		srv, cli     *Config
		server, clnt string // what each side's one line says
	}{
		// The client checks the server's certificate first, and the
		// server learns of the refusal from the client's alert.
		"client from another CA": {a, stranger,
			"peer client refused this process's certificate",
			"peer server presented a certificate (CN=a, issued by CN=gotrain cluster CA) not signed by the job's CA (" + files(other, "a").CA + ")"},
		"server from another CA": {stranger, a,
			"peer client refused this process's certificate",
			"peer server presented a certificate (CN=a, issued by CN=gotrain cluster CA) not signed by the job's CA (" + files(dir, "a").CA + ")"},
		"plain client": {a, nil,
			"peer client speaks plain TCP while this process uses TLS", ""},
		"plain server": {nil, a,
			"", "peer server speaks plain TCP while this process uses TLS"},
	} {
		serr, cerr := handshake(t, tc.srv, tc.cli)
		for _, side := range []struct {
			who  string
			err  error
			want string
		}{{"server", serr, tc.server}, {"client", cerr, tc.clnt}} {
			if side.want == "" {
				continue
			}
			if side.err == nil || !errors.Is(side.err, ErrRefused) || !strings.Contains(side.err.Error(), side.want) || strings.Contains(side.err.Error(), "\n") {
				t.Errorf("%s: %s side: %v\nwant one line with %q", name, side.who, side.err, side.want)
			}
		}
	}
}

func TestRefusedCertificateSeenByClient(t *testing.T) {
	// The client trusts the server, but the server does not trust the
	// client's certificate: with TLS 1.3 the client learns it at its first
	// read.
	dir := cluster(t, "a")
	other := cluster(t, "b")
	srv := load(t, files(dir, "a"))
	// Trusts dir's CA (so it accepts the server) but holds a certificate
	// from other: a CA file with both CAs.
	both := filepath.Join(t.TempDir(), "both.pem")
	ca1, _ := os.ReadFile(filepath.Join(dir, CAFile))
	ca2, _ := os.ReadFile(filepath.Join(other, CAFile))
	if err := os.WriteFile(both, append(ca1, ca2...), 0o644); err != nil {
		t.Fatal(err)
	}
	cli := load(t, Files{CA: both, Cert: files(other, "b").Cert, Key: files(other, "b").Key})
	serr, cerr := handshake(t, srv, cli)
	if serr == nil || !strings.Contains(serr.Error(), "peer client presented a certificate (CN=b") {
		t.Errorf("server: %v", serr)
	}
	if cerr == nil || !errors.Is(cerr, ErrRefused) || !strings.Contains(cerr.Error(), "peer server refused this process's certificate") {
		t.Errorf("client: %v, want the server's refusal of its certificate", cerr)
	}
}
