package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// newPair returns two handles on one fresh, empty store (the same object,
// two clients of one server, two opens of one file...). Cleanup is
// registered on t.
type newPair func(t *testing.T) (a, b Store)

func ctxFor(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// waitingCtx is a context that tells when a call first waits on it:
// every store looks for its key (or waits for its reply) before it
// selects on Done.
type waitingCtx struct {
	context.Context
	once    sync.Once
	waiting chan struct{}
}

func (c *waitingCtx) Done() <-chan struct{} {
	c.once.Do(func() { close(c.waiting) })
	return c.Context.Done()
}

// waitingFor returns a context of d for a blocking call and a channel
// closed once the call waits.
func waitingFor(t *testing.T, d time.Duration) (context.Context, <-chan struct{}) {
	c := &waitingCtx{Context: ctxFor(t, d), waiting: make(chan struct{})}
	return c, c.waiting
}

func mustSet(t *testing.T, s Store, key, value string) {
	t.Helper()
	if err := s.Set(ctxFor(t, 5*time.Second), key, []byte(value)); err != nil {
		t.Fatalf("Set(%q): %v", key, err)
	}
}

func mustGet(t *testing.T, s Store, key, want string) {
	t.Helper()
	v, err := s.Get(ctxFor(t, 5*time.Second), key)
	if err != nil || string(v) != want {
		t.Fatalf("Get(%q) = %q, %v; want %q", key, v, err, want)
	}
}

// testConformance checks the Store contract shared by every implementation.
func testConformance(t *testing.T, pair newPair) {
	t.Run("SetGet", func(t *testing.T) {
		a, b := pair(t)
		mustSet(t, a, "k", "v1")
		mustGet(t, a, "k", "v1")
		mustGet(t, b, "k", "v1")
		mustSet(t, b, "k", "v2")
		mustGet(t, a, "k", "v2")
		mustSet(t, a, "empty", "")
		mustGet(t, b, "empty", "")
		bin := []byte{0, 255, 1, '/', 0}
		if err := a.Set(ctxFor(t, time.Second), "bin", bin); err != nil {
			t.Fatal(err)
		}
		mustGet(t, b, "bin", string(bin))
		big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
		if err := a.Set(ctxFor(t, 5*time.Second), "big", big); err != nil {
			t.Fatal(err)
		}
		if v, err := b.Get(ctxFor(t, 5*time.Second), "big"); err != nil || !bytes.Equal(v, big) {
			t.Fatalf("1 MiB value: err %v, equal %v", err, bytes.Equal(v, big))
		}
	})

	t.Run("ValueIsCopied", func(t *testing.T) {
		a, _ := pair(t)
		buf := []byte("abc")
		if err := a.Set(ctxFor(t, time.Second), "k", buf); err != nil {
			t.Fatal(err)
		}
		buf[0] = 'X'
		v, _ := a.Get(ctxFor(t, time.Second), "k")
		v[1] = 'Y'
		mustGet(t, a, "k", "abc")
	})

	t.Run("AbsentKey", func(t *testing.T) {
		a, _ := pair(t)
		if n, err := a.NumKeys(ctxFor(t, time.Second)); err != nil || n != 0 {
			t.Fatalf("NumKeys of an empty store = %d, %v", n, err)
		}
		if ok, err := a.Delete(ctxFor(t, time.Second), "nope"); err != nil || ok {
			t.Fatalf("Delete(absent) = %v, %v", ok, err)
		}
	})

	t.Run("GetDeadline", func(t *testing.T) {
		a, _ := pair(t)
		start := time.Now()
		_, err := a.Get(ctxFor(t, 50*time.Millisecond), "never/set")
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "never/set") {
			t.Fatalf("err = %v; want a deadline error naming the key", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("Get returned %v after its deadline", d)
		}
		// The store still works after an abandoned Get.
		mustSet(t, a, "never/set", "now")
		mustGet(t, a, "never/set", "now")
	})

	t.Run("GetReleasedBySet", func(t *testing.T) {
		a, b := pair(t)
		got := make(chan string, 1)
		ctx, waiting := waitingFor(t, 5*time.Second)
		go func() {
			v, err := a.Get(ctx, "late")
			if err != nil {
				got <- "error: " + err.Error()
				return
			}
			got <- string(v)
		}()
		<-waiting
		select {
		case v := <-got:
			t.Fatalf("Get returned %q before the key was set", v)
		default:
		}
		mustSet(t, b, "late", "here")
		if v := <-got; v != "here" {
			t.Fatalf("blocked Get returned %q", v)
		}
	})

	t.Run("ManyBlockedGets", func(t *testing.T) {
		a, b := pair(t)
		const n = 50
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := fmt.Sprintf("rank/%d", i)
				v, err := a.Get(ctxFor(t, 10*time.Second), key)
				if err == nil && string(v) != key+"=addr" {
					err = fmt.Errorf("Get(%q) = %q", key, v)
				}
				if err != nil {
					errs <- err
				}
			}()
		}
		// Sets and Adds must not be held up by the blocked Gets.
		if _, err := a.Add(ctxFor(t, 5*time.Second), "counter", 1); err != nil {
			t.Fatal(err)
		}
		for i := n - 1; i >= 0; i-- {
			key := fmt.Sprintf("rank/%d", i)
			mustSet(t, b, key, key+"=addr")
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})

	t.Run("Add", func(t *testing.T) {
		a, b := pair(t)
		ctx := ctxFor(t, 5*time.Second)
		if n, err := a.Add(ctx, "c", 5); err != nil || n != 5 {
			t.Fatalf("Add(absent, 5) = %d, %v", n, err)
		}
		if n, err := b.Add(ctx, "c", -7); err != nil || n != -2 {
			t.Fatalf("Add(5, -7) = %d, %v", n, err)
		}
		mustGet(t, a, "c", "-2") // decimal, as in PyTorch
		mustSet(t, a, "text", "hello")
		if _, err := a.Add(ctx, "text", 1); err == nil || !strings.Contains(err.Error(), "text") {
			t.Fatalf("Add to a non-integer: err = %v", err)
		}
	})

	t.Run("ConcurrentAdd", func(t *testing.T) {
		a, b := pair(t)
		const workers, each = 8, 25
		var wg sync.WaitGroup
		seen := make(chan int64, workers*each)
		for w := range workers {
			s := a
			if w%2 == 1 {
				s = b
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range each {
					n, err := s.Add(ctxFor(t, 10*time.Second), "count", 1)
					if err != nil {
						t.Error(err)
						return
					}
					seen <- n
				}
			}()
		}
		wg.Wait()
		close(seen)
		got := map[int64]bool{}
		for n := range seen {
			if got[n] {
				t.Fatalf("Add returned %d twice", n)
			}
			got[n] = true
		}
		if len(got) != workers*each {
			t.Fatalf("%d distinct results, want %d", len(got), workers*each)
		}
		mustGet(t, a, "count", fmt.Sprint(workers*each))
	})

	t.Run("CompareAndSet", func(t *testing.T) {
		a, b := pair(t)
		ctx := ctxFor(t, 5*time.Second)
		// Absent key, non-empty expected: nothing set.
		if v, err := a.CompareAndSet(ctx, "k", []byte("x"), []byte("y")); err != nil || v != nil {
			t.Fatalf("CAS(absent, x→y) = %q, %v; want nil", v, err)
		}
		if ok, _ := a.Delete(ctx, "k"); ok {
			t.Fatal("CAS with a mismatched expected value created the key")
		}
		// Absent key, empty expected: set.
		if v, err := a.CompareAndSet(ctx, "k", nil, []byte("first")); err != nil || string(v) != "first" {
			t.Fatalf("CAS(absent, ''→first) = %q, %v", v, err)
		}
		// Mismatch: unchanged, current value returned.
		if v, err := b.CompareAndSet(ctx, "k", []byte("other"), []byte("second")); err != nil || string(v) != "first" {
			t.Fatalf("CAS(mismatch) = %q, %v", v, err)
		}
		// Match: swapped.
		if v, err := b.CompareAndSet(ctx, "k", []byte("first"), []byte("second")); err != nil || string(v) != "second" {
			t.Fatalf("CAS(match) = %q, %v", v, err)
		}
		mustGet(t, a, "k", "second")
	})

	t.Run("CompareAndSetRace", func(t *testing.T) {
		a, b := pair(t)
		// Exactly one of many racing CAS(absent → mine) wins.
		const n = 10
		wins := make(chan string, n)
		var wg sync.WaitGroup
		for i := range n {
			s := a
			if i%2 == 1 {
				s = b
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				mine := fmt.Sprint("candidate-", i)
				v, err := s.CompareAndSet(ctxFor(t, 5*time.Second), "leader", nil, []byte(mine))
				if err != nil {
					t.Error(err)
				} else if string(v) == mine {
					wins <- mine
				}
			}()
		}
		wg.Wait()
		close(wins)
		var winners []string
		for w := range wins {
			winners = append(winners, w)
		}
		if len(winners) != 1 {
			t.Fatalf("winners %q, want exactly one", winners)
		}
		mustGet(t, b, "leader", winners[0])
	})

	t.Run("Wait", func(t *testing.T) {
		a, b := pair(t)
		done := make(chan error, 1)
		go func() { done <- a.Wait(ctxFor(t, 5*time.Second), "w1", "w2") }()
		mustSet(t, b, "w1", "")
		select {
		case err := <-done:
			t.Fatalf("Wait returned %v with w2 unset", err)
		case <-time.After(30 * time.Millisecond):
		}
		mustSet(t, b, "w2", "")
		if err := <-done; err != nil {
			t.Fatalf("Wait: %v", err)
		}
		if err := a.Wait(ctxFor(t, time.Second)); err != nil {
			t.Fatalf("Wait for no keys: %v", err)
		}
		err := a.Wait(ctxFor(t, 50*time.Millisecond), "w1", "missing-key")
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "missing-key") {
			t.Fatalf("Wait with a missing key: err = %v; want a deadline error naming it", err)
		}
	})

	t.Run("DeleteNumKeys", func(t *testing.T) {
		a, b := pair(t)
		ctx := ctxFor(t, 5*time.Second)
		for i := range 3 {
			mustSet(t, a, fmt.Sprint("key", i), "x")
		}
		mustSet(t, a, "key0", "overwrite")
		if n, err := b.NumKeys(ctx); err != nil || n != 3 {
			t.Fatalf("NumKeys = %d, %v; want 3", n, err)
		}
		if ok, err := b.Delete(ctx, "key1"); err != nil || !ok {
			t.Fatalf("Delete(present) = %v, %v", ok, err)
		}
		if ok, err := a.Delete(ctx, "key1"); err != nil || ok {
			t.Fatalf("second Delete = %v, %v", ok, err)
		}
		if n, err := a.NumKeys(ctx); err != nil || n != 2 {
			t.Fatalf("NumKeys after Delete = %d, %v; want 2", n, err)
		}
		if _, err := a.Get(ctxFor(t, 30*time.Millisecond), "key1"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Get(deleted) = %v; want it to block until the deadline", err)
		}
		if n, err := a.Add(ctx, "key1", 3); err != nil || n != 3 {
			t.Fatalf("Add(deleted) = %d, %v; want 3", n, err)
		}
	})

	t.Run("TooLarge", func(t *testing.T) {
		a, _ := pair(t)
		ctx := ctxFor(t, 5*time.Second)
		long := strings.Repeat("k", MaxKeySize+1)
		if err := a.Set(ctx, long, nil); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("Set(long key) = %v", err)
		}
		if _, err := a.Get(ctx, long); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("Get(long key) = %v", err)
		}
		if err := a.Set(ctx, "k", make([]byte, MaxValueSize+1)); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("Set(huge value) = %v", err)
		}
	})

	t.Run("Close", func(t *testing.T) {
		a, _ := pair(t)
		blocked := make(chan error, 1)
		ctx, waiting := waitingFor(t, 10*time.Second)
		go func() {
			_, err := a.Get(ctx, "never")
			blocked <- err
		}()
		<-waiting
		if err := a.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := a.Set(ctxFor(t, time.Second), "k", nil); !errors.Is(err, ErrClosed) {
			t.Fatalf("Set after Close = %v; want ErrClosed", err)
		}
		if _, err := a.NumKeys(ctxFor(t, time.Second)); !errors.Is(err, ErrClosed) {
			t.Fatalf("NumKeys after Close = %v; want ErrClosed", err)
		}
		select {
		case err := <-blocked:
			if !errors.Is(err, ErrClosed) {
				t.Fatalf("Get blocked across Close = %v; want ErrClosed", err)
			}
		case <-time.After(3 * time.Second):
			t.Fatal("Get blocked across Close did not return")
		}
	})
}

func TestMemConformance(t *testing.T) {
	testConformance(t, func(t *testing.T) (Store, Store) {
		m := NewMem()
		t.Cleanup(func() { m.Close() })
		return m, m
	})
}

func TestPrefixConformance(t *testing.T) {
	testConformance(t, func(t *testing.T) (Store, Store) {
		m := NewMem()
		t.Cleanup(func() { m.Close() })
		return Prefix(m, "job/a"), Prefix(m, "job/a")
	})
}

func TestPrefixKeys(t *testing.T) {
	m := NewMem()
	defer m.Close()
	ctx := ctxFor(t, time.Second)
	Prefix(m, "a").Set(ctx, "k", []byte("1"))
	Prefix(m, "b/").Set(ctx, "k", []byte("2"))
	Prefix(Prefix(m, "c"), "d").Set(ctx, "k", []byte("3"))
	for key, want := range map[string]string{"a/k": "1", "b/k": "2", "c/d/k": "3"} {
		mustGet(t, m, key, want)
	}
	if n, _ := Prefix(m, "a").NumKeys(ctx); n != 3 {
		t.Fatalf("NumKeys through a prefix = %d; want all 3 keys of the store", n)
	}
	p := Prefix(m, "a")
	p.Close()
	if _, err := m.Get(ctx, "a/k"); err != nil {
		t.Fatalf("closing a prefix view closed the store: %v", err)
	}
}
