// Package testnet gives tests loopback addresses to use.
package testnet

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"testing"
)

// The range FreePort draws from.
const (
	portMin = 10000
	portMax = 20000
)

// FreePort returns a loopback TCP port that nothing listened on a moment
// ago. Another process may take it before the caller does; tests that can
// listen on port 0 themselves should, and use this only where a port must
// be known before anything listens on it (MASTER_PORT for ranks that
// serve the store themselves, an address nobody answers on).
//
// It draws the port from below the kernel's ephemeral range, where the
// local ports of outgoing connections (which tests open by the thousand)
// cannot take it in that window, and from below the ranges gotrain's
// launcher and data plane use themselves. Test binaries of several
// packages run at once, so each port is also reserved until the test
// ends (see reserve): no other test, in this process or another, is
// given it meanwhile.
func FreePort(t testing.TB) int {
	t.Helper()
	for range 64 {
		p := portMin + rand.IntN(portMax-portMin)
		ln, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		ln.Close()
		if reserve(t, p) {
			return p
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// FreeAddr returns "127.0.0.1:port" for a FreePort.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
}

// reserve claims port p for the rest of the test across every process on
// the machine, and reports whether the claim was free. The claim is a
// Linux abstract Unix socket named after the port: it needs no file, and
// the kernel drops it when the test closes it or its process exits.
func reserve(t testing.TB, p int) bool {
	if !abstractSockets {
		return true
	}
	ln, err := net.Listen("unix", fmt.Sprintf("@gotrain-test-port-%d", p))
	if err != nil {
		return false
	}
	t.Cleanup(func() { ln.Close() })
	return true
}
