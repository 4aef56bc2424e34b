package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/testing/clustertest"
)

// TestClusterTLS: `gotrain tls init` makes a certificate per host;
// `gotrain train mnist --hosts … --tls-…` with {host} in the paths
// trains over mutual TLS (the agents' store and the data plane), and
// the same job with host 1's certificate from another CA fails, naming
// the refused certificate.
func TestClusterTLS(t *testing.T) {
	c := newCluster(t, 2, clustertest.Options{})
	hosts := c.Hosts[0].Addr + "," + c.Hosts[1].Addr
	dir := tlsDir(t, hosts)
	tlsArgs := func(dir string) []string {
		return []string{"--tls-ca", filepath.Join(dir, "ca.pem"),
			"--tls-cert", filepath.Join(dir, "{host}.pem"), "--tls-key", filepath.Join(dir, "{host}-key.pem")}
	}
	all, stdout, code := runGotrain(t, 90*time.Second, append(mnistOnHosts(c, 2, "--max-steps", "4"), tlsArgs(dir)...)...)
	if code != 0 {
		t.Fatalf("2 hosts × 2 workers over TLS: exit code %d:\n%s", code, all)
	}
	if kv := summary(t, stdout); kv["world"] != "4" || kv["steps"] != "4" {
		t.Errorf("summary %v: want world=4 steps=4", kv)
	}

	// Host 1 gets a certificate of another CA, under the same names.
	other := tlsDir(t, c.Hosts[1].Addr)
	mixed := t.TempDir()
	for _, f := range []struct{ from, name string }{
		{dir, "ca.pem"}, {dir, c.Hosts[0].Addr + ".pem"}, {dir, c.Hosts[0].Addr + "-key.pem"},
		{other, c.Hosts[1].Addr + ".pem"}, {other, c.Hosts[1].Addr + "-key.pem"},
	} {
		b, err := os.ReadFile(filepath.Join(f.from, f.name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(mixed, f.name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	all, _, code = runGotrain(t, 90*time.Second, append(mnistOnHosts(c, 2, "--max-steps", "4"), tlsArgs(mixed)...)...)
	if code == 0 {
		t.Fatalf("a certificate of another CA: exit code 0:\n%s", all)
	}
	// Host 1's workers check their certificate against the CA first.
	named := false
	for l := range strings.Lines(all) {
		if strings.Contains(l, c.Hosts[1].Addr+".pem") && strings.Contains(l, "does not verify against the CA") {
			named = true
			t.Logf("refused: %s", strings.TrimSpace(l))
		}
	}
	if !named {
		t.Errorf("no line names host 1's certificate and the CA:\n%s", all)
	}
	if d := time.Since(start); d > 60*time.Second {
		t.Errorf("the refused job took %v", d)
	}
}
