package tcp_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotrain/gotrain/distributed/internal/transport"
	"github.com/gotrain/gotrain/distributed/internal/transport/tcp"
	"github.com/gotrain/gotrain/distributed/internal/transport/transporttest"
	"github.com/gotrain/gotrain/distributed/store"
	"github.com/gotrain/gotrain/distributed/tlsconf"
	"github.com/gotrain/gotrain/internal/testlog"
)

// tlsConfigs makes a CA and one certificate per rank, and loads each.
func tlsConfigs(t testing.TB, n int) []*tlsconf.Config {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tls")
	var hosts []string
	for r := range n {
		hosts = append(hosts, "rank"+string(rune('0'+r)))
	}
	if err := tlsconf.Generate(dir, hosts, time.Hour); err != nil {
		t.Fatal(err)
	}
	cs := make([]*tlsconf.Config, n)
	for r, h := range hosts {
		c, err := tlsconf.Load(tlsconf.Files{CA: filepath.Join(dir, tlsconf.CAFile),
			Cert: filepath.Join(dir, tlsconf.CertFile(h)), Key: filepath.Join(dir, tlsconf.KeyFile(h))})
		if err != nil {
			t.Fatal(err)
		}
		cs[r] = c
	}
	return cs
}

// TestConformanceTLS runs the transport suite with every connection
// inside mutual TLS, with and without shared memory.
func TestConformanceTLS(t *testing.T) {
	cs := tlsConfigs(t, 5)
	for _, shm := range []string{"1", "0"} {
		t.Run("shm="+shm, func(t *testing.T) {
			t.Setenv("GOTRAIN_SHM", shm)
			transporttest.Run(t, func(t *testing.T, n int) []transport.Mesh {
				return connectWith(t, n, func(r int, o *tcp.Options) { o.TLS = cs[r] })
			})
		})
	}
}

// connectWith is connect with each rank's Options changed by mod.
func connectWith(t *testing.T, n int, mod func(r int, o *tcp.Options)) []transport.Mesh {
	t.Helper()
	ms, errs, _ := connectAll(n, 10*time.Second, mod)
	for r, err := range errs {
		if err != nil {
			for _, m := range ms {
				if m != nil {
					m.Close()
				}
			}
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return ms
}

// connectAll connects n ranks, each with Options changed by mod, within
// timeout, and returns each rank's mesh or error and how long it took.
func connectAll(n int, timeout time.Duration, mod func(r int, o *tcp.Options)) ([]transport.Mesh, []error, []time.Duration) {
	st := store.NewMem()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ms := make([]transport.Mesh, n)
	errs := make([]error, n)
	took := make([]time.Duration, n)
	start := time.Now()
	var wg sync.WaitGroup
	for r := range ms {
		wg.Go(func() {
			defer func() { took[r] = time.Since(start) }()
			o := tcp.Options{Rank: r, Size: n, Store: st, Token: []byte("t"), JobID: "j", ListenHost: "127.0.0.1"}
			mod(r, &o)
			m, err := tcp.Connect(ctx, o)
			if err == nil {
				ms[r] = m
			}
			errs[r] = err
		})
	}
	wg.Wait()
	return ms, errs, took
}

// TestTLSMismatch: rank 2 of 3 dials ranks 0 and 1 with TLS settings
// that do not match theirs. Rank 2 fails naming the peer and what is
// wrong, and ranks 0 and 1 log the refused connection. (In a job, rank
// 2's failure reaches every rank through the store.)
func TestTLSMismatch(t *testing.T) {
	cs := tlsConfigs(t, 3)
	stranger := tlsConfigs(t, 3)[2]
	for _, tc := range []struct {
		name         string
		tls          func(r int) *tlsconf.Config
		dialer, peer string // what rank 2 says (all of its "|"-separated parts); what ranks 0 and 1 log
	}{
		{"plain dialer", func(r int) *tlsconf.Config { return []*tlsconf.Config{cs[0], cs[1], nil}[r] },
			"uses TLS and this process does not", "speaks plain TCP while this process uses TLS"},
		{"TLS dialer", func(r int) *tlsconf.Config { return []*tlsconf.Config{nil, nil, cs[2]}[r] },
			") speaks plain TCP while this process uses TLS", "uses TLS and this process does not"},
		{"other CA", func(r int) *tlsconf.Config { return []*tlsconf.Config{cs[0], cs[1], stranger}[r] },
			"(rank |) presented a certificate (CN=rank| issued by CN=gotrain cluster CA) not signed by the job's CA", "refused this process's certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs testlog.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			ms, errs, took := connectAll(3, 5*time.Second, func(r int, o *tcp.Options) {
				o.TLS, o.Logger = tc.tls(r), log
			})
			for _, m := range ms {
				if m != nil {
					m.Close()
				}
			}
			ok := errs[2] != nil && strings.Contains(errs[2].Error(), "tcp: rank 2: ")
			for _, part := range strings.Split(tc.dialer, "|") {
				ok = ok && strings.Contains(errs[2].Error(), part)
			}
			if !ok {
				t.Errorf("rank 2: %v\nwant an error of rank 2 with %q", errs[2], tc.dialer)
			}
			// Not the connect timeout: the refusal ends it.
			if errs[2] != nil && took[2] > 4*time.Second {
				t.Errorf("rank 2 took %v to fail", took[2])
			}
			if !strings.Contains(logs.String(), tc.peer) {
				t.Errorf("ranks 0 and 1 logged:\n%s\nwant a refusal saying %q", logs.String(), tc.peer)
			}
		})
	}
}
