package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/gotrain/gotrain/distributed/store"
	"github.com/gotrain/gotrain/distributed/tlsconf"
)

// storeBackend is a Backend over a gotrain TCP store (torchrun's c10d
// backend): the state is one key changed by CompareAndSet, and each
// node's heartbeat a counter it increments, judged dead when it stops
// moving for deadAfter by the observer's own clock (the store keeps no
// time, and the nodes' clocks need not agree).
type storeBackend struct {
	s         store.Store
	server    *store.Server // non-nil if this node serves the store
	deadAfter time.Duration
	linger    time.Duration
	now       func() time.Time

	mu    sync.Mutex // guards beats and self
	beats map[string]beatSeen
	self  string // the node that beats through this backend
}

// beatSeen is the last value of a node's counter and when it changed.
type beatSeen struct {
	n     int64
	since time.Time
}

const (
	stateKey = "state"
	beatKey  = "alive/"
	leftKey  = "left/" // set by a node's Close: it is gone, not dead
)

// NewStoreBackend returns a Backend over s under the keys of runID
// (/gotrain/<runID>/...). A node's heartbeat counts as lapsed when its
// counter has not moved for deadAfter (0: DefaultDeadAfter).
func NewStoreBackend(ctx context.Context, s store.Store, runID string, deadAfter time.Duration) (Backend, error) {
	if deadAfter == 0 {
		deadAfter = DefaultDeadAfter
	}
	b := &storeBackend{s: store.Prefix(s, "/gotrain/"+runID), deadAfter: deadAfter, now: time.Now, beats: map[string]beatSeen{}}
	// The state key always exists, so Load never blocks in Get.
	if _, err := b.s.CompareAndSet(ctx, stateKey, nil, encode(State{})); err != nil {
		return nil, fmt.Errorf("rendezvous: initialising the state: %w", err)
	}
	return b, nil
}

// StoreConfig is where and how a node reaches the c10d backend's store.
type StoreConfig struct {
	// Endpoint is the store's host:port (torchrun --rdzv-endpoint).
	Endpoint string
	// Token authenticates the store's connections (GOTRAIN_TOKEN).
	Token []byte
	// TLS, if set, runs the store's connections inside mutual TLS (see
	// store.WithTLS); nil means plain TCP.
	TLS *tlsconf.Config
	// RunID names the job; its keys are /gotrain/<RunID>/...
	RunID string
	// Host, if set, says whether this node serves the store (torchrun's
	// is_host); nil decides by the endpoint's address (see StoreEndpoint).
	Host *bool
	// DeadAfter is how long a node's heartbeat may stand still before it
	// counts as dead (0: DefaultDeadAfter).
	DeadAfter time.Duration
	// Linger bounds how long a node that serves the store keeps it, on
	// Close, for the other nodes still using it (0: DefaultLinger).
	Linger time.Duration
	// Logger receives the serving node's records; nil means slog.Default().
	Logger *slog.Logger
}

// DefaultLinger is StoreConfig.Linger's default.
const DefaultLinger = 30 * time.Second

// StoreEndpoint is the c10d backend at cfg.Endpoint. If the endpoint is
// an address of this machine and free, this node serves the store there
// (as torchrun's c10d backend does on the node whose address it is);
// otherwise, or if another process already serves it, it connects,
// waiting up to 60 s for the store to come up. Closing the Backend stops
// a store this node serves once every other node has left or died, or
// after cfg.Linger.
func StoreEndpoint(ctx context.Context, cfg StoreConfig) (Backend, error) {
	endpoint := cfg.Endpoint
	if cfg.Linger == 0 {
		cfg.Linger = DefaultLinger
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	h, _, err := net.SplitHostPort(endpoint)
	if err != nil {
		return nil, fmt.Errorf("rendezvous: endpoint %q: want host:port: %w", endpoint, err)
	}
	serve := isLocalHost(h)
	if cfg.Host != nil {
		serve = *cfg.Host
	}
	var srv *store.Server
	if serve {
		srv, err = store.Listen(endpoint, cfg.Token, store.WithTLS(cfg.TLS))
		switch {
		case err == nil:
			log.Info("rendezvous: serving the c10d rendezvous store", "endpoint", endpoint)
		case errors.Is(err, syscall.EADDRINUSE) && cfg.Host == nil:
			srv = nil // another node on this machine serves it
		default:
			return nil, fmt.Errorf("rendezvous: serving the store at %s: %w", endpoint, err)
		}
	}
	dctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	c, err := store.Dial(dctx, endpoint, cfg.Token, store.WithTLS(cfg.TLS))
	if err != nil {
		if srv != nil {
			srv.Close()
		}
		return nil, fmt.Errorf("rendezvous: c10d store: %w", err)
	}
	b, err := NewStoreBackend(ctx, c, cfg.RunID, cfg.DeadAfter)
	if err != nil {
		c.Close()
		if srv != nil {
			srv.Close()
		}
		return nil, err
	}
	sb := b.(*storeBackend)
	sb.s, sb.server, sb.linger = &closingStore{Store: sb.s, c: c}, srv, cfg.Linger
	return sb, nil
}

// closingStore closes the client under a prefixed view.
type closingStore struct {
	store.Store
	c *store.Client
}

func (s *closingStore) Close() error {
	s.Store.Close()
	return s.c.Close()
}

// isLocalHost reports whether h names this machine: loopback, one of its
// interface addresses, or its host name.
func isLocalHost(h string) bool {
	if h == "localhost" {
		return true
	}
	if name, err := osHostname(); err == nil && name == h {
		return true
	}
	ip := net.ParseIP(h)
	if ip == nil {
		return false
	}
	if ip.IsLoopback() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

func (b *storeBackend) Load(ctx context.Context) ([]byte, string, error) {
	v, err := b.s.Get(ctx, stateKey)
	return v, string(v), err
}

func (b *storeBackend) Swap(ctx context.Context, version string, state []byte) (bool, error) {
	now, err := b.s.CompareAndSet(ctx, stateKey, []byte(version), state)
	if err != nil {
		return false, err
	}
	return string(now) == string(state), nil
}

func (b *storeBackend) Beat(ctx context.Context, node string) error {
	b.mu.Lock()
	b.self = node
	b.mu.Unlock()
	_, err := b.s.Add(ctx, beatKey+node, 1)
	return err
}

func (b *storeBackend) Alive(ctx context.Context, nodes []string) (map[string]bool, error) {
	out := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		v, err := b.s.Add(ctx, beatKey+n, 0)
		if err != nil {
			return nil, err
		}
		out[n] = b.seen(n, v)
	}
	return out, nil
}

// seen records counter value v of node and reports whether it has moved
// within deadAfter. A node first seen now counts as alive until then.
func (b *storeBackend) seen(node string, v int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	last, ok := b.beats[node]
	if !ok || last.n != v {
		b.beats[node] = beatSeen{n: v, since: now}
		return true
	}
	return now.Sub(last.since) < b.deadAfter
}

// Close says that this node left, and, if it serves the store, keeps
// serving it until every other node of the state has left or is dead,
// or linger passes: the others may still be finishing their round.
func (b *storeBackend) Close() error {
	b.mu.Lock()
	self := b.self
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), max(b.linger, time.Second))
	defer cancel()
	if self != "" {
		_, _ = b.s.Add(ctx, leftKey+self, 1) // the store may be gone already
	}
	if b.server != nil {
		b.waitOthersGone(ctx, self)
	}
	err := b.s.Close()
	if b.server != nil {
		b.server.Close()
	}
	return err
}

// waitOthersGone waits until no node of the state but self is still
// there (neither left nor dead), or ctx ends.
func (b *storeBackend) waitOthersGone(ctx context.Context, self string) {
	for {
		v, err := b.s.Get(ctx, stateKey)
		if err != nil {
			return
		}
		s, err := decode(v)
		if err != nil {
			return
		}
		ids := slices.DeleteFunc(append(s.ids(), s.Previous...), func(id string) bool { return id == self })
		alive, err := b.Alive(ctx, ids)
		if err != nil {
			return
		}
		there := 0
		for _, id := range ids {
			if n, err := b.s.Add(ctx, leftKey+id, 0); err == nil && n == 0 && alive[id] {
				there++
			}
		}
		if there == 0 {
			return
		}
		select {
		case <-ctx.Done():
			slog.Warn("rendezvous: stopped serving the store with nodes still using it", "nodes", there, "waited", b.linger)
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}
