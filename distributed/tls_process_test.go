package distributed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/distributed/tlsconf"
	"github.com/gotrain/gotrain/internal/testproc"
)

func init() {
	// Allreduce over TLS and check the sum; say what TLS negotiated.
	workers["tls-allreduce"] = func() int {
		return rank(func(ctx context.Context, g *Group) error {
			n := 1<<20 + 3 // several frames, and not a multiple of anything
			buf := make([]float32, n)
			for i := range buf {
				buf[i] = float32(g.Rank()*7 + i%13)
			}
			if err := g.AllReduce(ctx, buf, Sum); err != nil {
				return err
			}
			w := g.Size()
			for i, v := range buf {
				if want := float32(7*w*(w-1)/2 + w*(i%13)); v != want {
					return fmt.Errorf("element %d = %v, want %v", i, v, want)
				}
			}
			fmt.Println("tls:", tlsconf.Negotiated())
			return nil
		})
	}
}

// tlsCluster makes a CA and certificates for hosts with tlsconf.Generate.
func tlsCluster(t *testing.T, hosts ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tls")
	if err := tlsconf.Generate(dir, hosts, time.Hour); err != nil {
		t.Fatal(err)
	}
	return dir
}

// tlsEnv is the environment of a rank with dir's CA and host's
// certificate, the certificate named through the {host} pattern.
func tlsEnv(dir, host string) []string {
	return []string{
		tlsconf.EnvCA + "=" + filepath.Join(dir, tlsconf.CAFile),
		tlsconf.EnvCert + "=" + filepath.Join(dir, tlsconf.CertFile(tlsconf.HostPattern)),
		tlsconf.EnvKey + "=" + filepath.Join(dir, tlsconf.KeyFile(tlsconf.HostPattern)),
		tlsconf.EnvHost + "=" + host,
	}
}

// TestProcessTLS: 2 and 3 ranks, each with a certificate of its own,
// allreduce over mutual TLS (shared memory off, so that every byte
// crosses a TLS connection).
func TestProcessTLS(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprint("world", n), func(t *testing.T) {
			dir := tlsCluster(t, "node0", "node1", "node2")
			ranks := testproc.Start(t, "tls-allreduce", n, testproc.Options{
				Env:     []string{"GOTRAIN_TOKEN=tls-test", "GOTRAIN_RUN_ID=" + t.Name(), "GOTRAIN_SHM=0"},
				RankEnv: func(r int) []string { return tlsEnv(dir, fmt.Sprint("node", r)) },
			})
			ranks.WaitOK()
			for _, p := range ranks.Procs() {
				if _, ok := p.WaitLine("tls: TLS 1.3 TLS_", 0); !ok {
					t.Errorf("rank %d did not report a TLS 1.3 data plane", p.Rank)
				}
			}
		})
	}
}

// TestProcessKillTLS: TestProcessKill over mutual TLS: a rank SIGKILLed
// mid-allreduce fails every other rank within 2 s, naming it.
func TestProcessKillTLS(t *testing.T) {
	if raceEnabled {
		t.Skip("64 MiB allreduces are too slow under the race detector")
	}
	dir := tlsCluster(t, "node0")
	testKill(t, append([]string{"GOTRAIN_SHM=0"}, tlsEnv(dir, "node0")...)...)
}

// TestProcessTLSRefused: a rank that speaks plain TCP, or holds a
// certificate the job's CA did not sign, or trusts another CA, fails
// every rank within a bound, each with a line naming what is wrong.
func TestProcessTLSRefused(t *testing.T) {
	dir := tlsCluster(t, "node0", "node1", "node2")
	other := tlsCluster(t, "node2")
	// A CA file trusting both CAs: its holder accepts the job's
	// certificates, but its own comes from the other CA.
	both := filepath.Join(t.TempDir(), "both.pem")
	ca1, _ := os.ReadFile(filepath.Join(dir, tlsconf.CAFile))
	ca2, _ := os.ReadFile(filepath.Join(other, tlsconf.CAFile))
	if err := os.WriteFile(both, append(ca1, ca2...), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		odd  []string // the environment of rank 2
		// What rank 2 says, and what the others say.
		self, others string
	}{
		{"plain", []string{tlsconf.EnvCA + "=", tlsconf.EnvCert + "=", tlsconf.EnvKey + "="},
			"uses TLS and this process does not", "speaks plain TCP while this process uses TLS"},
		{"other cluster", tlsEnv(other, "node2"),
			"presented a certificate (CN=node0, issued by CN=gotrain cluster CA) not signed by the job's CA (" + filepath.Join(other, tlsconf.CAFile) + ")",
			"refused this process's certificate"},
		{"certificate of another CA", append(tlsEnv(other, "node2"), tlsconf.EnvCA+"="+both),
			"refused this process's certificate",
			"presented a certificate (CN=node2, issued by CN=gotrain cluster CA) not signed by the job's CA (" + filepath.Join(dir, tlsconf.CAFile) + ")"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			ranks := testproc.Start(t, "tls-allreduce", 3, testproc.Options{
				Env: []string{"GOTRAIN_TOKEN=tls-test", "GOTRAIN_RUN_ID=" + t.Name(), "GOTRAIN_SHM=0"},
				RankEnv: func(r int) []string {
					if r == 2 {
						return tc.odd
					}
					return tlsEnv(dir, fmt.Sprint("node", r))
				},
			})
			for _, p := range ranks.Procs() {
				want := tc.others
				if p.Rank == 2 {
					want = tc.self
				}
				line, ok := p.WaitLine("init error:", 15*time.Second)
				if !ok {
					t.Errorf("rank %d did not fail its Init", p.Rank)
					continue
				}
				if !strings.Contains(line.Text, want) {
					t.Errorf("rank %d: %s\nwant it to say %q", p.Rank, line.Text, want)
				}
			}
			ranks.Wait()
			// The ranks' connect timeout is 20 s: a refusal ends them well
			// before.
			if d := time.Since(start); d > 15*time.Second {
				t.Errorf("the ranks took %v to fail", d)
			}
		})
	}
}

// TestResolveTLS: Config's TLS files come from its fields, else from
// GOTRAIN_TLS_*, with {host} expanded from GOTRAIN_TLS_HOST; settings
// that cannot work are one ErrConfig line.
func TestResolveTLS(t *testing.T) {
	dir := tlsCluster(t, "node0", "node1")
	for _, kv := range tlsEnv(dir, "node1") {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	var c Config
	if err := c.resolveTLS(); err != nil {
		t.Fatal(err)
	}
	if c.tls == nil || c.TLSCert != filepath.Join(dir, "{host}.pem") {
		t.Fatalf("from the environment: tls %v, TLSCert %q", c.tls, c.TLSCert)
	}
	if got := c.tls.Files().Cert; got != filepath.Join(dir, "node1.pem") {
		t.Errorf("{host} expanded to %s, want node1.pem", got)
	}
	// Fields win over the environment, all three together.
	c = Config{TLSCA: filepath.Join(dir, "ca.pem"), TLSCert: filepath.Join(dir, "node0.pem"), TLSKey: filepath.Join(dir, "node0-key.pem")}
	if err := c.resolveTLS(); err != nil || c.tls.Files().Cert != filepath.Join(dir, "node0.pem") {
		t.Fatalf("from the fields: %v, %+v", err, c.tls)
	}
	c = Config{TLSCA: filepath.Join(dir, "ca.pem")}
	err := c.resolveTLS()
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "--tls-cert (GOTRAIN_TLS_CERT) and --tls-key (GOTRAIN_TLS_KEY) not set") {
		t.Errorf("a CA alone: %v", err)
	}
	t.Setenv(tlsconf.EnvHost, "node9")
	c = Config{}
	if err := c.resolveTLS(); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "node9.pem") {
		t.Errorf("a host without a certificate: %v", err)
	}
	for _, k := range []string{tlsconf.EnvCA, tlsconf.EnvCert, tlsconf.EnvKey} {
		t.Setenv(k, "")
	}
	c = Config{}
	if err := c.resolveTLS(); err != nil || c.tls != nil {
		t.Errorf("no settings: %v, tls %v; want plain TCP", err, c.tls)
	}
}
