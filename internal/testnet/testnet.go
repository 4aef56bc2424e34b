// Package testnet gives tests loopback addresses to use.
package testnet

import (
	"net"
	"strconv"
	"testing"
)

// FreePort returns a loopback TCP port that nothing listened on a moment
// ago. Another process may take it before the caller does; tests that can
// listen on port 0 themselves should, and use this only where a port must
// be known before anything listens on it (MASTER_PORT for ranks that
// serve the store themselves, an address nobody answers on).
func FreePort(t testing.TB) int {
	t.Helper()
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
