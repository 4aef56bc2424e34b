package distributed

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotrain/gotrain/distributed/store"
)

const testToken = "test-token"

// startStore serves a TCP store on a free loopback port for the test.
func startStore(t testing.TB) string {
	t.Helper()
	srv, err := store.Listen("127.0.0.1:0", []byte(testToken))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv.Addr().String()
}

// runGroup runs fn on n ranks, each a goroutine with its own Group over
// loopback TCP, and fails the test with every rank's error.
func runGroup(t testing.TB, n int, mod func(*Config), fn func(ctx context.Context, g *Group) error) {
	t.Helper()
	addr := startStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := Config{InitMethod: "tcp://" + addr, Rank: r, WorldSize: n, Token: testToken,
				JobID: t.Name(), AgentStore: true, ConnectTimeout: 20 * time.Second, Timeout: 30 * time.Second}
			if mod != nil {
				mod(&cfg)
			}
			g, err := Init(ctx, cfg)
			if err != nil {
				errs[r] = err
				return
			}
			defer g.Destroy()
			errs[r] = fn(ctx, g)
		}()
	}
	wg.Wait()
	var b strings.Builder
	for r, err := range errs {
		if err != nil {
			fmt.Fprintf(&b, "\nrank %d: %v", r, err)
		}
	}
	if b.Len() > 0 {
		t.Fatalf("world %d:%s", n, b.String())
	}
}
