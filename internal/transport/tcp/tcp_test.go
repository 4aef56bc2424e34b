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

	"github.com/gotrain/gotrain/distributed/store"
	"github.com/gotrain/gotrain/internal/auth"
	"github.com/gotrain/gotrain/internal/shm"
	"github.com/gotrain/gotrain/internal/transport"
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

// TestFrames sends inline and shared-memory frames both ways, with and
// without reduction, with and without the shared-memory ring.
func TestFrames(t *testing.T) {
	for _, on := range []string{"1", "0"} {
		t.Run("shm="+on, func(t *testing.T) {
			t.Setenv("GOTRAIN_SHM", on)
			ms := connect(t, 2)
			if got := ms[0].pairs[1].ring != nil; got != (on == "1") {
				t.Fatalf("shared memory in use: %v, want %v", got, on == "1")
			}
			ctx := context.Background()
			for seq, size := range []int{0, 8, shm.RingMinPayload, shm.SlotSize, 3 * shm.SlotSize} {
				want := make([]byte, size)
				for i := range want {
					want[i] = byte(i*7 + seq)
				}
				h := hdr(uint64(seq), size)
				r := transport.NewRecv(h, make([]byte, size), nil)
				ms[1].Pair(0).Post(r)
				// 20 frames in flight exercise the ring's wrap-around.
				sum := transport.NewRecv(h, make([]byte, size), func(d, s []byte) {
					for i := range s {
						d[i] += s[i]
					}
				})
				ms[0].Pair(1).Post(sum)
				if err := ms[0].Pair(1).Send(ctx, h, want); err != nil {
					t.Fatal(err)
				}
				if err := ms[1].Pair(0).Send(ctx, h, want); err != nil {
					t.Fatal(err)
				}
				<-r.Done()
				<-sum.Done()
				if r.Err() != nil || sum.Err() != nil {
					t.Fatal(r.Err(), sum.Err())
				}
				if string(r.Buf) != string(want) || string(sum.Buf) != string(want) {
					t.Fatalf("size %d: payload differs", size)
				}
			}
			for i := 0; i < 20; i++ {
				h := hdr(uint64(100+i), shm.SlotSize/2)
				r := transport.NewRecv(h, make([]byte, shm.SlotSize/2), nil)
				ms[1].Pair(0).Post(r)
				if err := ms[0].Pair(1).Send(ctx, h, make([]byte, shm.SlotSize/2)); err != nil {
					t.Fatal(err)
				}
				defer func() { <-r.Done() }()
			}
		})
	}
}

// TestMalformedFrame: garbage on a connection fails the mesh with
// ErrMalformed; nothing panics or allocates the announced size.
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

// TestMismatchFrame: a frame of another operation fails the receive.
func TestMismatchFrame(t *testing.T) {
	ms := connect(t, 3)
	r := transport.NewRecv(hdr(0, 2), make([]byte, 8), nil)
	ms[0].Pair(2).Post(r)
	other := hdr(0, 4)
	if err := ms[2].Pair(0).Send(context.Background(), other, make([]byte, 16)); err != nil {
		t.Fatal(err)
	}
	<-r.Done()
	var me *transport.MismatchError
	if !errors.As(r.Err(), &me) || me.Got.Count != 4 {
		t.Fatalf("got %v, want a MismatchError", r.Err())
	}
	// Every rank hears of it.
	deadline := time.Now().Add(3 * time.Second)
	for _, m := range ms[1:] {
		for m.Err() == nil && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if !errors.Is(m.Err(), transport.ErrAborted) && !errors.Is(m.Err(), transport.ErrMismatch) {
			t.Errorf("rank %d: %v", m.Rank(), m.Err())
		}
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
