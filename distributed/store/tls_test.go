package store

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotrain/gotrain/distributed/internal/auth"
	"github.com/gotrain/gotrain/distributed/tlsconf"
	"github.com/gotrain/gotrain/internal/testproc"
)

// tlsSetups makes a CA with certificates for hosts and loads each.
func tlsSetups(t *testing.T, hosts ...string) []*tlsconf.Config {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tls")
	if err := tlsconf.Generate(dir, hosts, time.Hour); err != nil {
		t.Fatal(err)
	}
	var cs []*tlsconf.Config
	for _, h := range hosts {
		c, err := tlsconf.Load(tlsconf.Files{CA: filepath.Join(dir, tlsconf.CAFile),
			Cert: filepath.Join(dir, tlsconf.CertFile(h)), Key: filepath.Join(dir, tlsconf.KeyFile(h))})
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	return cs
}

// TestTLSStore: a client with a certificate of the server's CA uses the
// store over TLS; a plain client, a client of another CA and a TLS
// client of a plain server are refused at once (not retried until the
// deadline), each with one line saying why, and the TLS server reports
// its refusals to OnRefused.
func TestTLSStore(t *testing.T) {
	cs := tlsSetups(t, "server", "client")
	stranger := tlsSetups(t, "client")[0]
	srv, err := Listen("127.0.0.1:0", testToken, WithTLS(cs[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var mu sync.Mutex
	var refused []string
	srv.OnRefused(func(remote net.Addr, err error) {
		mu.Lock()
		refused = append(refused, err.Error())
		mu.Unlock()
	})
	addr := srv.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	c, err := Dial(ctx, addr, testToken, WithTLS(cs[1]))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "k"); err != nil || string(v) != "v" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	c.Close()

	plainSrv := startServer(t)
	for _, tc := range []struct {
		name   string
		addr   string
		opts   []Option
		is     error
		client string // in the client's error
		server string // in what the TLS server reported ("" none)
	}{
		{"plain client", addr, nil, auth.ErrTLSMismatch,
			"uses TLS and this process does not", "speaks plain TCP while this process uses TLS"},
		{"client of another CA", addr, []Option{WithTLS(stranger)}, tlsconf.ErrRefused,
			"presented a certificate (CN=server, issued by CN=gotrain cluster CA) not signed by the job's CA", "refused this process's certificate"},
		{"TLS client, plain server", plainSrv.Addr().String(), []Option{WithTLS(cs[1])}, tlsconf.ErrRefused,
			"speaks plain TCP while this process uses TLS", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			refused = nil
			mu.Unlock()
			start := time.Now()
			c, err := Dial(ctx, tc.addr, testToken, tc.opts...)
			if err == nil {
				c.Close()
				t.Fatal("Dial succeeded")
			}
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.client) || strings.Contains(err.Error(), "\n") {
				t.Errorf("Dial: %v\nwant one line wrapping %v with %q", err, tc.is, tc.client)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("Dial took %v: retried a refusal", d)
			}
			if tc.server == "" {
				return
			}
			ok := testproc.Poll(5*time.Second, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(refused) > 0 && strings.Contains(refused[0], tc.server)
			})
			if !ok {
				mu.Lock()
				t.Errorf("the server reported %q, want %q", refused, tc.server)
				mu.Unlock()
			}
		})
	}
}
