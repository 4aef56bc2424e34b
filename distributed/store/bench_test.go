package store

import (
	"context"
	"fmt"
	"sync"
	"testing"
)

func benchClient(b *testing.B) *Client {
	b.Helper()
	s, err := Listen("127.0.0.1:0", testToken)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	c, err := Dial(context.Background(), s.Addr().String(), testToken)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// BenchmarkTCPSetGet is one Set and one Get of a small value: two round
// trips on loopback.
func BenchmarkTCPSetGet(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	v := []byte("10.0.0.1:29500")
	for b.Loop() {
		if err := c.Set(ctx, "k", v); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Get(ctx, "k"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTCPAdd(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	for b.Loop() {
		if _, err := c.Add(ctx, "n", 1); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTCPSetGet1MiB(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	v := make([]byte, 1<<20)
	b.SetBytes(2 << 20)
	for b.Loop() {
		if err := c.Set(ctx, "k", v); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Get(ctx, "k"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTCPRendezvous is a rendezvous of 16 ranks, each with its own
// client: every rank sets its address, then gets every other rank's.
func BenchmarkTCPRendezvous(b *testing.B) {
	const ranks = 16
	s, err := Listen("127.0.0.1:0", testToken)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	clients := make([]*Client, ranks)
	for i := range clients {
		if clients[i], err = Dial(ctx, s.Addr().String(), testToken); err != nil {
			b.Fatal(err)
		}
		defer clients[i].Close()
	}
	round := 0
	for b.Loop() {
		round++
		var wg sync.WaitGroup
		for r, c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := c.Set(ctx, fmt.Sprint(round, "/", r), []byte("addr")); err != nil {
					b.Error(err)
					return
				}
				for p := range ranks {
					if _, err := c.Get(ctx, fmt.Sprint(round, "/", p)); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
}
