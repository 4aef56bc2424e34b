package store

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/resolve"
)

// TestDialUnresolvable: a server host that does not resolve fails Dial
// at once, naming the host and the resolver's error, instead of being
// retried until the context ends.
func TestDialUnresolvable(t *testing.T) {
	resolveHost = func(ctx context.Context, host string) ([]net.IP, error) {
		return nil, &resolve.Error{Host: host, Tries: resolve.Tries, Took: 900 * time.Millisecond,
			Err: &net.DNSError{Err: "no such host", Name: host, Server: "10.0.0.53:53", IsNotFound: true}}
	}
	defer func() { resolveHost = resolve.Host }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	_, err := Dial(ctx, "node0:29500", []byte("token"))
	if err == nil || !strings.Contains(err.Error(), `store: connect to node0:29500: cannot resolve host "node0" (3 tries in 900ms): lookup node0 on 10.0.0.53:53: no such host`) {
		t.Fatalf("Dial: %v; want the host and the lookup named", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Dial returned after %v", d)
	}
}
