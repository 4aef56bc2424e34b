package freeport

import "testing"

// TestPick: the port is drawn from the range below the ephemeral ports.
func TestPick(t *testing.T) {
	p, err := Pick("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if p < Min || p >= Max {
		// The fallback only when 32 draws were all taken: not on a
		// machine running one test.
		t.Fatalf("port %d outside [%d, %d)", p, Min, Max)
	}
}

// TestPickBadAddr: an address this machine does not have is an error
// naming it.
func TestPickBadAddr(t *testing.T) {
	if _, err := Pick("192.0.2.1"); err == nil {
		t.Fatal("Pick on an address not on this machine: no error")
	}
}
