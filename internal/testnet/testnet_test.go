package testnet

import (
	"runtime"
	"testing"
)

// TestReserve: a port FreePort gave is claimed until its test ends, so
// no other test is given it; once that test ends it is free again.
func TestReserve(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("ports are claimed only on Linux")
	}
	var p int
	t.Run("holder", func(t *testing.T) {
		p = FreePort(t)
		if reserve(t, p) {
			t.Fatalf("port %d claimed twice while its test runs", p)
		}
	})
	if !reserve(t, p) {
		t.Fatalf("port %d still claimed after its test ended", p)
	}
}
