package tcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotrain/gotrain/distributed/internal/auth"
	"github.com/gotrain/gotrain/distributed/internal/transport"
	"github.com/gotrain/gotrain/distributed/store"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// connect builds an n-rank mesh in this process over loopback.
func connect(t *testing.T, n int) []*Mesh {
	t.Helper()
	st := store.NewMem()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ms := make([]*Mesh, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ms[r], errs[r] = Connect(ctx, Options{Rank: r, Size: n, Store: st, Token: []byte("t"), JobID: "j", ListenHost: "127.0.0.1"})
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	t.Cleanup(func() {
		for _, m := range ms {
			m.Close()
		}
	})
	return ms
}

func hdr(seq uint64, n int) transport.Header {
	return transport.Header{Kind: transport.KindCollective, Op: 1, DType: 1, Root: -1, Seq: seq, Count: uint64(n)}
}

// TestSharedMemoryInUse: same-host peers get a shared-memory ring unless
// GOTRAIN_SHM=0, so TestConformance covers both payload paths.
func TestSharedMemoryInUse(t *testing.T) {
	for _, on := range []string{"1", "0"} {
		t.Run("shm="+on, func(t *testing.T) {
			t.Setenv("GOTRAIN_SHM", on)
			ms := connect(t, 2)
			for _, p := range []*pair{ms[0].pairs[1], ms[1].pairs[0]} {
				if got := p.ring != nil; got != (on == "1") {
					t.Fatalf("rank %d: shared memory in use with rank %d: %v, want %v", p.m.rank, p.peer, got, on == "1")
				}
			}
		})
	}
}

// TestMalformedFrame: a header announcing a 4 GiB payload, written on the
// connection itself (Send cannot make one), fails the mesh with
// ErrMalformed; nothing panics or allocates the announced size.
// TestConformance checks the malformed frames Send can make.
func TestMalformedFrame(t *testing.T) {
	ms := connect(t, 2)
	var b [transport.HeaderSize]byte
	(&transport.Header{Kind: transport.KindCollective, Length: 8}).Encode(b[:])
	b[12], b[13], b[14], b[15] = 0xff, 0xff, 0xff, 0xff // 4 GiB payload
	ms[1].pairs[0].conn.Write(b[:])
	r := transport.NewRecv(hdr(0, 8), make([]byte, 8), nil)
	ms[0].Pair(1).Post(r)
	select {
	case <-r.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("receive not failed")
	}
	if !errors.Is(r.Err(), transport.ErrMalformed) {
		t.Fatalf("got %v, want ErrMalformed", r.Err())
	}
}

// TestStrayClient: a client that connects to a rank's data port and says
// nothing does not hold up the rendezvous; one with a wrong token is
// refused.
func TestStrayClient(t *testing.T) {
	st := store.NewMem()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ms := make([]*Mesh, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	start := func(r int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ms[r], errs[r] = Connect(ctx, Options{Rank: r, Size: 2, Store: st, Token: []byte("t"), JobID: "j", ListenHost: "127.0.0.1"})
		}()
	}
	start(0)
	addr, err := st.Get(ctx, "addr/0")
	if err != nil {
		t.Fatal(err)
	}
	silent, err := net.Dial("tcp", string(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	intruder, err := Connect(ctx, Options{Rank: 1, Size: 2, Store: st, Token: []byte("wrong"), JobID: "j", ListenHost: "127.0.0.1"})
	if err == nil {
		intruder.Close()
		t.Fatal("a rank with the wrong token joined")
	}
	start(1)
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for _, m := range ms {
		m.Close()
	}
}

// TestVersionMismatch: a peer speaking another protocol version is
// refused, and the error names both versions.
func TestVersionMismatch(t *testing.T) {
	st := store.NewMem()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		m, err := Connect(ctx, Options{Rank: 0, Size: 2, Store: st, JobID: "j", ListenHost: "127.0.0.1"})
		if err == nil {
			m.Close()
		}
		done <- err
	}()
	_, err := Connect(ctx, Options{Rank: 1, Size: 2, Store: st, JobID: "j", ListenHost: "127.0.0.1", version: auth.ProtocolVersion + 1})
	if !errors.Is(err, auth.ErrVersion) {
		t.Fatalf("got %v, want auth.ErrVersion", err)
	}
	for _, v := range []string{fmt.Sprint("version ", auth.ProtocolVersion), fmt.Sprint("version ", auth.ProtocolVersion+1)} {
		if !strings.Contains(err.Error(), v) {
			t.Errorf("error does not name %q: %v", v, err)
		}
	}
	if err := <-done; err == nil {
		t.Fatal("rank 0 formed a mesh without rank 1")
	}
}
