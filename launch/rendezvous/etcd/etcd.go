// Package etcd is the etcd backend of gotrain's elastic rendezvous
// (torchrun --rdzv-backend etcd): the state of a job lives in an etcd
// cluster, so no gotrain process is a single point of failure, and each
// node's liveness is a key bound to a lease that lapses when its
// heartbeats stop.
//
// Keys, under /gotrain/<run id>/: "state", the rendezvous state (JSON),
// changed only by transactions that compare its mod revision; and
// "alive/<node id>", empty, attached to the node's lease. The client is
// the official go.etcd.io/etcd/client/v3, which speaks the v3 API of
// every etcd from 3.4 on.
package etcd

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/gotrain/gotrain/launch/rendezvous"
)

// dialTimeout bounds connecting to the cluster and the first read.
const dialTimeout = 10 * time.Second

// Backend is a rendezvous.Backend over etcd.
type Backend struct {
	c      *clientv3.Client
	prefix string
	ttl    int64 // lease seconds

	mu    sync.Mutex // guards lease
	lease clientv3.LeaseID
}

var _ rendezvous.Backend = (*Backend)(nil)

// Dial connects to the etcd cluster at endpoints (host:port each) for the
// job runID. A node's liveness lease lasts deadAfter (rounded up to whole
// seconds, at least 2; 0 means rendezvous.DefaultDeadAfter). It fails if
// no endpoint answers within 10 s.
func Dial(ctx context.Context, endpoints []string, runID string, deadAfter time.Duration) (*Backend, error) {
	if deadAfter == 0 {
		deadAfter = rendezvous.DefaultDeadAfter
	}
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: dialTimeout,
		Logger:      zap.NewNop(), // its retries are reported as our errors
		Context:     context.WithoutCancel(ctx),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd: connecting to %s: %w", strings.Join(endpoints, ","), err)
	}
	b := &Backend{c: c, prefix: "/gotrain/" + runID + "/", ttl: max(2, int64(math.Ceil(deadAfter.Seconds())))}
	rctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	if _, err := c.Get(rctx, b.prefix+"state"); err != nil {
		c.Close()
		return nil, fmt.Errorf("etcd: no answer from %s: %w", strings.Join(endpoints, ","), err)
	}
	return b, nil
}

// Load implements rendezvous.Backend: the version is the key's mod
// revision ("0" while it does not exist).
func (b *Backend) Load(ctx context.Context) ([]byte, string, error) {
	r, err := b.c.Get(ctx, b.prefix+"state")
	if err != nil {
		return nil, "", fmt.Errorf("etcd: get state: %w", err)
	}
	if len(r.Kvs) == 0 {
		return nil, "0", nil
	}
	return r.Kvs[0].Value, strconv.FormatInt(r.Kvs[0].ModRevision, 10), nil
}

// Swap implements rendezvous.Backend with a transaction on the mod
// revision (0 matches an absent key).
func (b *Backend) Swap(ctx context.Context, version string, state []byte) (bool, error) {
	rev, err := strconv.ParseInt(version, 10, 64)
	if err != nil {
		return false, fmt.Errorf("etcd: swap: bad version %q", version)
	}
	key := b.prefix + "state"
	r, err := b.c.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpPut(key, string(state))).
		Commit()
	if err != nil {
		return false, fmt.Errorf("etcd: swap state: %w", err)
	}
	return r.Succeeded, nil
}

// Beat implements rendezvous.Backend: the first beat grants the lease
// and puts the node's key under it, later ones renew it; a lease that
// expired meanwhile (a pause longer than its TTL) is granted anew.
func (b *Backend) Beat(ctx context.Context, node string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.lease != 0 {
		_, err := b.c.KeepAliveOnce(ctx, b.lease)
		if !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			if err != nil {
				return fmt.Errorf("etcd: renew lease: %w", err)
			}
			return nil
		}
		b.lease = 0
	}
	g, err := b.c.Grant(ctx, b.ttl)
	if err != nil {
		return fmt.Errorf("etcd: grant lease: %w", err)
	}
	if _, err := b.c.Put(ctx, b.prefix+"alive/"+node, "", clientv3.WithLease(g.ID)); err != nil {
		return fmt.Errorf("etcd: put liveness key: %w", err)
	}
	b.lease = g.ID
	return nil
}

// Alive implements rendezvous.Backend: a node is alive while its key is.
func (b *Backend) Alive(ctx context.Context, nodes []string) (map[string]bool, error) {
	r, err := b.c.Get(ctx, b.prefix+"alive/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("etcd: get liveness keys: %w", err)
	}
	present := map[string]bool{}
	for _, kv := range r.Kvs {
		present[strings.TrimPrefix(string(kv.Key), b.prefix+"alive/")] = true
	}
	out := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		out[n] = present[n]
	}
	return out, nil
}

// Close revokes the node's lease, so the others see it gone at once, and
// closes the client.
func (b *Backend) Close() error {
	b.mu.Lock()
	lease := b.lease
	b.lease = 0
	b.mu.Unlock()
	if lease != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, _ = b.c.Revoke(ctx, lease) // it expires by itself otherwise
		cancel()
	}
	return b.c.Close()
}
