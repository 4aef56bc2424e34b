package tlsconf

import (
	"context"
	"io"
	"net"
	"testing"
)

// BenchmarkPipe streams 4 MiB writes both ways over one loopback TCP
// connection, plain and inside this package's TLS, side by side: what the
// standard library's TLS leaves of a connection's throughput on this
// machine, with nothing of gotrain's data plane around it (the bound for
// docs/bench/tls_allreduce.sh's ratios). Bytes count both directions.
func BenchmarkPipe(b *testing.B) {
	dir := cluster(b, "a", "b")
	for _, mode := range []string{"plain", "tls"} {
		b.Run(mode, func(b *testing.B) {
			x, y := pipe(b, mode == "tls", load(b, files(dir, "a")), load(b, files(dir, "b")))
			const chunk = 4 << 20
			b.SetBytes(2 * chunk)
			stream := func(w io.Writer, r io.Reader, done chan<- error) {
				go func() {
					buf := make([]byte, chunk)
					for range b.N {
						if _, err := w.Write(buf); err != nil {
							done <- err
							return
						}
					}
					done <- nil
				}()
				go func() {
					buf := make([]byte, chunk)
					for range b.N {
						if _, err := io.ReadFull(r, buf); err != nil {
							done <- err
							return
						}
					}
					done <- nil
				}()
			}
			b.ResetTimer()
			done := make(chan error, 4)
			stream(x, y, done)
			stream(y, x, done)
			for range 4 {
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// pipe returns the two ends of a loopback TCP connection, inside mutual
// TLS with server's and client's certificates if useTLS.
func pipe(b *testing.B, useTLS bool, server, client *Config) (net.Conn, net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		c   net.Conn
		err error
	}
	accepted := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil && useTLS {
			c, err = server.ServerConn(context.Background(), c, "client", nil)
		}
		accepted <- result{c, err}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err == nil && useTLS {
		c, err = client.ClientConn(context.Background(), c, "server")
	}
	if err != nil {
		b.Fatal(err)
	}
	s := <-accepted
	if s.err != nil {
		b.Fatal(s.err)
	}
	b.Cleanup(func() { c.Close(); s.c.Close() })
	return s.c, c
}
