package etcd

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testetcd"
)

func TestBackend(t *testing.T) {
	ep := testetcd.Start(t)
	ctx := context.Background()
	a, err := Dial(ctx, []string{ep}, "job", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Dial(ctx, []string{ep}, "job", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}

	// The state: absent, then changed only at the version read.
	st, ver, err := a.Load(ctx)
	if err != nil || st != nil || ver != "0" {
		t.Fatalf("Load of a new job: %q, %q, %v; want nothing at version 0", st, ver, err)
	}
	if ok, err := a.Swap(ctx, ver, []byte("one")); !ok || err != nil {
		t.Fatalf("Swap at the current version: %v, %v", ok, err)
	}
	if ok, err := b.Swap(ctx, ver, []byte("two")); ok || err != nil {
		t.Fatalf("Swap at a stale version: %v, %v; want refused", ok, err)
	}
	if st, _, _ := b.Load(ctx); string(st) != "one" {
		t.Fatalf("state %q; want one", st)
	}
	if other, _ := Dial(ctx, []string{ep}, "other-job", 0); other != nil {
		if st, _, _ := other.Load(ctx); st != nil {
			t.Fatalf("another run id sees state %q", st)
		}
		other.Close()
	}

	// Liveness: a beating node is alive; one that stops beating lapses
	// with its lease; one that closes is gone at once.
	for _, n := range []struct {
		be *Backend
		id string
	}{{a, "a"}, {b, "b"}} {
		if err := n.be.Beat(ctx, n.id); err != nil {
			t.Fatal(err)
		}
	}
	if m, err := a.Alive(ctx, []string{"a", "b", "c"}); err != nil || !m["a"] || !m["b"] || m["c"] {
		t.Fatalf("Alive: %v, %v; want a and b", m, err)
	}
	// a beats every 100 ms, well within its lease, while b's lapses.
	beat := time.NewTicker(100 * time.Millisecond)
	defer beat.Stop()
	for deadline := time.Now().Add(10 * time.Second); ; <-beat.C {
		if err := a.Beat(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		m, err := a.Alive(ctx, []string{"a", "b"})
		if err != nil {
			t.Fatal(err)
		}
		if !m["a"] {
			t.Fatal("a beating node lapsed")
		}
		if !m["b"] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a node that stopped beating is still alive after 10s (lease of 2s)")
		}
	}
	b.Close()
	c, err := Dial(ctx, []string{ep}, "job", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Beat(ctx, "c")
	c.Close()
	if m, _ := a.Alive(ctx, []string{"c"}); m["c"] {
		t.Fatal("a node that closed is still alive")
	}
}

func TestDialUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := Dial(ctx, []string{addr}, "job", 0); err == nil {
		t.Fatal("Dial of an address with no etcd succeeded")
	}
}
