package rendezvous

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/distributed/tlsconf"
)

// TestStoreEndpointTLS: with StoreConfig.TLS the node that serves the
// c10d store serves it over mutual TLS: a node with a certificate of the
// CA meets it in a round, a node without TLS is refused with a line
// saying so.
func TestStoreEndpointTLS(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	if err := tlsconf.Generate(dir, []string{"a", "b"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	load := func(h string) *tlsconf.Config {
		c, err := tlsconf.Load(tlsconf.Files{CA: filepath.Join(dir, tlsconf.CAFile),
			Cert: filepath.Join(dir, tlsconf.CertFile(h)), Key: filepath.Join(dir, tlsconf.KeyFile(h))})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ep := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	serve, join := true, false
	cfg := StoreConfig{Endpoint: ep, Token: []byte("secret"), RunID: "job", DeadAfter: time.Second, Linger: time.Second}
	hostCfg := cfg
	hostCfg.TLS, hostCfg.Host = load("a"), &serve
	hostB, err := StoreEndpoint(ctx, hostCfg)
	if err != nil {
		t.Fatal(err)
	}
	clientCfg := cfg
	clientCfg.TLS, clientCfg.Host = load("b"), &join
	clientB, err := StoreEndpoint(ctx, clientCfg)
	if err != nil {
		t.Fatal(err)
	}
	h, c := node(t, hostB, fast("h", 2, 2)), node(t, clientB, fast("c", 2, 2))
	checkGroup(t, nextAll(t, h, c), 0, 2)

	plainCfg := cfg
	plainCfg.Host = &join
	start := time.Now()
	_, err = StoreEndpoint(ctx, plainCfg)
	if err == nil || !strings.Contains(err.Error(), "uses TLS and this process does not") {
		t.Errorf("a node without TLS: %v, want a refusal saying the store uses TLS", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the refusal took %v", d)
	}
	c.Close()
	h.Close()
}
