package store

import (
	"context"
	"errors"
	"net"

	"github.com/gotrain/gotrain/distributed/internal/auth"
	"github.com/gotrain/gotrain/distributed/tlsconf"
)

// Option configures Listen, Serve and Dial.
type Option func(*options)

type options struct {
	tls *tlsconf.Config
}

// WithTLS runs every connection inside mutual TLS with c: the server
// requires a client certificate signed by c's CA, the client verifies the
// server's; the token handshake runs inside. nil means plain TCP.
func WithTLS(c *tlsconf.Config) Option {
	return func(o *options) { o.tls = c }
}

func makeOptions(opts []Option) options {
	var o options
	for _, f := range opts {
		f(&o)
	}
	return o
}

// answerPlain tells a plain-TCP client of a TLS server why it is refused.
func answerPlain(c net.Conn) error { return auth.RequireTLS(c) }

// clientTLS wraps a dialed conn in TLS when o asks for it. A refusal (a
// certificate either side does not accept, plain TCP against TLS) comes
// back wrapping tlsconf.ErrRefused.
func (o options) clientTLS(ctx context.Context, conn net.Conn, addr string) (net.Conn, error) {
	if o.tls == nil {
		return conn, nil
	}
	tc, err := o.tls.ClientConn(ctx, conn, addr)
	if err != nil {
		return nil, err
	}
	return tc, nil
}

// refusedForGood reports whether a handshake error will not change by
// retrying: a refusal, or a peer that is not a gotrain store of this
// job's kind.
func refusedForGood(err error) bool {
	return errors.Is(err, auth.ErrAuth) || errors.Is(err, auth.ErrVersion) ||
		errors.Is(err, auth.ErrRejected) || errors.Is(err, auth.ErrProtocol) ||
		errors.Is(err, auth.ErrTLSMismatch) || errors.Is(err, tlsconf.ErrRefused)
}
