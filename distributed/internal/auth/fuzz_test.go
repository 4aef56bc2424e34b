package auth

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"
)

// FuzzReadMsg feeds arbitrary bytes to the frame reader: it must never
// panic and never return a message past MaxMessageSize.
func FuzzReadMsg(f *testing.F) {
	f.Add([]byte{0, 3, 1, 2, 3})
	f.Add([]byte{0xff, 0xff, 1})
	f.Add([]byte{0, 0})
	f.Add([]byte("GET / HTTP/1.1\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		buf := make([]byte, MaxMessageSize)
		r := bytes.NewReader(data)
		for {
			m, err := readMsg(r, buf)
			if err != nil {
				return
			}
			if len(m) == 0 || len(m) > MaxMessageSize {
				t.Fatalf("message of %d bytes", len(m))
			}
		}
	})
}

// FuzzDecode feeds arbitrary messages to every handshake decoder; each must
// either fail with an error or decode something that re-encodes to the same
// bytes.
func FuzzDecode(f *testing.F) {
	var nonce [nonceSize]byte
	hello, _ := encodeHello(Hello{Version: 1, Role: RoleData, JobID: "job", Rank: 2, WorldSize: 4})
	mac := make([]byte, macSize)
	f.Add(encodeClientHello(clientHello{version: 1, nonce: nonce}))
	f.Add(encodeChallenge(challenge{version: 1, status: statusVersion, nonce: nonce}))
	f.Add(encodeProof(mac, hello))
	f.Add(encodeAccept(mac, hello))
	f.Add(encodeRefusal(statusRejected, "duplicate rank"))
	f.Fuzz(func(t *testing.T, msg []byte) {
		if len(msg) > MaxMessageSize {
			return
		}
		if m, err := decodeClientHello(msg); err == nil && !bytes.Equal(encodeClientHello(m), msg) {
			t.Fatalf("client hello %x re-encodes differently", msg)
		}
		if m, err := decodeChallenge(msg); err == nil && !bytes.Equal(encodeChallenge(m), msg) {
			t.Fatalf("challenge %x re-encodes differently", msg)
		}
		if m, err := decodeProof(msg); err == nil {
			b, err := encodeHello(m.hello)
			if err != nil || !bytes.Equal(b, m.helloBytes) || !bytes.Equal(encodeProof(m.mac[:], b), msg) {
				t.Fatalf("proof %x re-encodes differently", msg)
			}
		}
		if m, err := decodeResult(msg); err == nil && m.status == statusOK {
			b, err := encodeHello(m.hello)
			if err != nil || !bytes.Equal(encodeAccept(m.mac[:], b), msg) {
				t.Fatalf("result %x re-encodes differently", msg)
			}
		} else if err == nil && len(m.reason) <= maxReason && !bytes.Equal(encodeRefusal(m.status, m.reason), msg) {
			t.Fatalf("refusal %x re-encodes differently", msg)
		}
	})
}

// fuzzConn is a net.Conn that reads a fixed input and discards writes.
type fuzzConn struct {
	net.Conn // nil: methods not overridden below must not be called
	r        *bytes.Reader
}

func (c *fuzzConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *fuzzConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *fuzzConn) RemoteAddr() net.Addr             { return &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1} }
func (c *fuzzConn) SetDeadline(time.Time) error      { return nil }
func (c *fuzzConn) SetReadDeadline(time.Time) error  { return nil }
func (c *fuzzConn) SetWriteDeadline(time.Time) error { return nil }

// FuzzServer runs the whole server side against arbitrary client bytes: it
// must fail cleanly, and it can only succeed if the input carries a valid
// proof, which random bytes cannot.
func FuzzServer(f *testing.F) {
	var nonce [nonceSize]byte
	hello, _ := encodeHello(Hello{Version: ProtocolVersion, Role: RoleData, JobID: "j"})
	first := encodeClientHello(clientHello{version: ProtocolVersion, nonce: nonce})
	proof := encodeProof(make([]byte, macSize), hello)
	frame := func(m []byte) []byte { return append([]byte{0, byte(len(m))}, m...) }
	f.Add(append(frame(first), frame(proof)...))
	f.Add(frame(first))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	f.Cleanup(func() { slog.SetDefault(old) })
	f.Fuzz(func(t *testing.T, data []byte) {
		conn := &fuzzConn{r: bytes.NewReader(data)}
		_, err := Server(context.Background(), conn, []byte("token"), Hello{Role: RoleData}, nil)
		if err == nil {
			t.Fatalf("handshake accepted from arbitrary bytes %x", data)
		}
	})
}
