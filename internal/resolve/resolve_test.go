package resolve

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// fakeLookup answers with fail's error for the first fails lookups, then
// with 10.0.0.1, counting the lookups in n.
func fakeLookup(t *testing.T, fails int, n *int) {
	t.Helper()
	old := lookup
	t.Cleanup(func() { lookup = old })
	lookup = func(ctx context.Context, host string) ([]net.IP, error) {
		*n++
		if *n <= fails {
			return nil, &net.DNSError{Err: "no such host", Name: host, Server: "10.0.0.53:53", IsNotFound: true}
		}
		return []net.IP{net.IPv4(10, 0, 0, 1)}, nil
	}
}

// TestHostGivesUp: a name that never resolves fails after Tries lookups,
// within seconds, naming the host and the resolver's answer.
func TestHostGivesUp(t *testing.T) {
	var n int
	fakeLookup(t, 1000, &n)
	start := time.Now()
	_, err := Host(context.Background(), "node0")
	var re *Error
	if !errors.As(err, &re) || n != Tries || !strings.Contains(err.Error(), `cannot resolve host "node0" (3 tries in`) ||
		!strings.Contains(err.Error(), "lookup node0 on 10.0.0.53:53: no such host") {
		t.Fatalf("Host: %v after %d lookups; want an *Error after %d naming node0 and the resolver's answer", err, n, Tries)
	}
	if !IsDNS(err) {
		t.Errorf("IsDNS(%v) = false", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("gave up after %v", d)
	}
}

// TestHostRetries: a resolver that drops a query is asked again.
func TestHostRetries(t *testing.T) {
	var n int
	fakeLookup(t, 2, &n)
	ips, err := Host(context.Background(), "node0")
	if err != nil || len(ips) != 1 || !ips[0].Equal(net.IPv4(10, 0, 0, 1)) || n != 3 {
		t.Fatalf("Host: %v, %v after %d lookups; want 10.0.0.1 on the third", ips, err, n)
	}
}

// TestHostLiteral: an IP address is no lookup.
func TestHostLiteral(t *testing.T) {
	var n int
	fakeLookup(t, 1000, &n)
	ips, err := Host(context.Background(), "10.1.2.3")
	if err != nil || len(ips) != 1 || !ips[0].Equal(net.IPv4(10, 1, 2, 3)) || n != 0 {
		t.Fatalf("Host: %v, %v after %d lookups; want the address, no lookup", ips, err, n)
	}
}

// TestHostContext: the caller's context ends the retries.
func TestHostContext(t *testing.T) {
	var n int
	fakeLookup(t, 1000, &n)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Host(ctx, "node0"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Host: %v; want context.Canceled", err)
	}
}
