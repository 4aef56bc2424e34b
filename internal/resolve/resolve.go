// Package resolve looks host names up with a short, bounded retry: a
// resolver that drops one query is tried again, and a name that does not
// resolve fails within seconds with the resolver's own error, not after
// a connect timeout spent dialing a name that never resolves.
package resolve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// Tries is how many lookups Host makes before it gives up.
const Tries = 3

// Gap is the wait before the second lookup; it doubles after each,
// so Host gives up within about 2·Gap·(Tries-1) plus the lookups' own
// time.
const Gap = 300 * time.Millisecond

// Error is a host name that did not resolve after every try.
type Error struct {
	Host  string
	Tries int
	Took  time.Duration
	Err   error // the last lookup's error (a *net.DNSError)
}

func (e *Error) Error() string {
	return fmt.Sprintf("cannot resolve host %q (%d tries in %v): %v", e.Host, e.Tries, e.Took.Round(10*time.Millisecond), e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// lookup is the resolver Host asks; tests replace it.
var lookup = func(ctx context.Context, host string) ([]net.IP, error) {
	return net.DefaultResolver.LookupIP(ctx, "ip", host)
}

// Host returns host's addresses: host itself when it is an IP address,
// else what the resolver answers within Tries lookups. Its error is an
// *Error naming the host and the resolver's last answer, or ctx's error.
func Host(ctx context.Context, host string) ([]net.IP, error) {
	if ip := net.ParseIP(host); ip != nil {
		return []net.IP{ip}, nil
	}
	start := time.Now()
	gap := Gap
	var last error
	for try := 1; ; try++ {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ips, err := lookup(lctx, host)
		cancel()
		if err == nil && len(ips) > 0 {
			return ips, nil
		}
		if err == nil {
			err = fmt.Errorf("no address for %s", host)
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("resolve %q: %w", host, context.Cause(ctx))
		}
		last = err
		if try == Tries {
			return nil, &Error{Host: host, Tries: try, Took: time.Since(start), Err: last}
		}
		t := time.NewTimer(gap)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("resolve %q: %w (last error: %v)", host, context.Cause(ctx), last)
		}
		gap *= 2
	}
}

// IsDNS reports whether err is a failed name lookup (a *net.DNSError
// or an *Error), as opposed to a failed connection.
func IsDNS(err error) bool {
	var de *net.DNSError
	var re *Error
	return errors.As(err, &de) || errors.As(err, &re)
}
