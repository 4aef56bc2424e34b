package auth

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// TestTLSMismatch: a server that receives a TLS ClientHello, and a client
// whose server answers RequireTLS, each report one end using TLS.
func TestTLSMismatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	c, s := net.Pipe()
	go func() {
		// The first bytes of a TLS ClientHello record (the server reads
		// no more: a pipe, unlike TCP, holds no unread bytes).
		c.Write([]byte{0x16, 0x03})
		buf := make([]byte, 64)
		c.Read(buf) // the plain answer the server sends
		c.Close()
	}()
	_, err := Server(ctx, s, []byte("tok"), Hello{Role: RoleData}, nil)
	s.Close()
	if !errors.Is(err, ErrTLSMismatch) || !strings.Contains(err.Error(), "uses TLS and this process does not") {
		t.Errorf("server given a TLS hello: %v", err)
	}

	c2, s2 := net.Pipe()
	go func() {
		buf := make([]byte, MaxMessageSize+2)
		if _, err := readMsg(s2, buf); err == nil {
			RequireTLS(s2)
		}
		s2.Close()
	}()
	_, err = Client(ctx, c2, []byte("tok"), Hello{Role: RoleData})
	c2.Close()
	if !errors.Is(err, ErrTLSMismatch) || !strings.Contains(err.Error(), "uses TLS and this process does not") {
		t.Errorf("client answered RequireTLS: %v", err)
	}
}
