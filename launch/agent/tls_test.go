package agent

import (
	"slices"
	"testing"

	"github.com/gotrain/gotrain/distributed/tlsconf"
)

// TestWithTLSHost: with TLS settings the workers get this node's name
// for {host}, over any the launcher forwarded; without, nothing changes.
func TestWithTLSHost(t *testing.T) {
	env := []string{"A=1", tlsconf.EnvCA + "=/tls/ca.pem", tlsconf.EnvHost + "=launcher"}
	got := withTLSHost(env, "node1")
	if v, _ := envLookup(got)(tlsconf.EnvHost); v != "node1" {
		t.Errorf("%s = %q, want node1", tlsconf.EnvHost, v)
	}
	plain := []string{"A=1"}
	if got := withTLSHost(plain, "node1"); !slices.Equal(got, plain) {
		t.Errorf("without TLS: %v", got)
	}
	if _, ok := envLookup(plain)("B"); ok {
		t.Error("envLookup found an unset variable")
	}
}
