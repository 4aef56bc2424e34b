package store_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/gotrain/gotrain/distributed/store"
)

// Rank 0 serves the store; every rank dials it and publishes its address.
// A Get blocks until another rank has set the key.
func ExampleListen() {
	token := []byte("job token from GOTRAIN_TOKEN")
	srv, err := store.Listen("127.0.0.1:0", token)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Dial retries until the server is up or ctx ends.
	rank0, err := store.Dial(ctx, srv.Addr().String(), token)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rank0.Close()
	rank1, err := store.Dial(ctx, srv.Addr().String(), token)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rank1.Close()

	go rank1.Set(ctx, "addr/1", []byte("10.0.0.2:40001"))
	addr, err := rank0.Get(ctx, "addr/1") // waits for rank 1
	if err != nil {
		fmt.Println(err)
		return
	}
	arrived, _ := rank0.Add(ctx, "arrived", 1)
	fmt.Printf("rank 1 listens on %s; %d rank arrived\n", addr, arrived)
	// Output: rank 1 listens on 10.0.0.2:40001; 1 rank arrived
}

func ExampleNewFile() {
	dir, _ := os.MkdirTemp("", "gotrain-store")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "rendezvous") // on a file system every rank sees

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := store.NewFile(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	b, err := store.NewFile(path) // another process would do the same
	if err != nil {
		fmt.Println(err)
		return
	}
	a.Set(ctx, "master", []byte("10.0.0.1:29500"))
	v, _ := b.Get(ctx, "master")
	fmt.Println(string(v))
	a.Close()
	b.Close() // the last user removes the file
	_, err = os.Stat(path)
	fmt.Println(os.IsNotExist(err))
	// Output:
	// 10.0.0.1:29500
	// true
}

// Prefix namespaces keys, so two process groups (or two restarts of a job)
// can share one store.
func ExamplePrefix() {
	ctx := context.Background()
	s := store.NewMem()
	defer s.Close()
	g1 := store.Prefix(s, "group1")
	g2 := store.Prefix(s, "group2")
	g1.Add(ctx, "barrier", 1)
	n, _ := g2.Add(ctx, "barrier", 1)
	v, _ := s.Get(ctx, "group1/barrier")
	fmt.Println(n, string(v))
	// Output: 1 1
}

// CompareAndSet elects a leader: only the first candidate's value sticks.
func ExampleStore_compareAndSet() {
	ctx := context.Background()
	var s store.Store = store.NewMem()
	defer s.Close()
	for _, candidate := range []string{"rank 2", "rank 0", "rank 1"} {
		leader, _ := s.CompareAndSet(ctx, "leader", nil, []byte(candidate))
		fmt.Printf("%s sees leader %s\n", candidate, leader)
	}
	// Output:
	// rank 2 sees leader rank 2
	// rank 0 sees leader rank 2
	// rank 1 sees leader rank 2
}
