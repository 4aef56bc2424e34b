package tcp_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gotrain/gotrain/distributed/internal/transport"
	"github.com/gotrain/gotrain/distributed/internal/transport/tcp"
	"github.com/gotrain/gotrain/distributed/internal/transport/transporttest"
	"github.com/gotrain/gotrain/distributed/store"
)

// TestConformance runs the transport suite over loopback, with payloads
// through the shared-memory rings of same-host peers and with every
// payload on the socket (as between hosts).
func TestConformance(t *testing.T) {
	for _, shm := range []string{"1", "0"} {
		t.Run("shm="+shm, func(t *testing.T) {
			t.Setenv("GOTRAIN_SHM", shm)
			transporttest.Run(t, connect)
		})
	}
}

// connect builds an n-rank mesh in this process over loopback.
func connect(t *testing.T, n int) []transport.Mesh {
	t.Helper()
	st := store.NewMem()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ms := make([]transport.Mesh, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range ms {
		wg.Go(func() {
			m, err := tcp.Connect(ctx, tcp.Options{Rank: r, Size: n, Store: st, Token: []byte("t"), JobID: "j", ListenHost: "127.0.0.1"})
			if err == nil {
				ms[r] = m
			}
			errs[r] = err
		})
	}
	wg.Wait()
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
