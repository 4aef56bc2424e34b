package store

import (
	"context"
	"errors"
	"strings"
	"sync"
)

// Prefix returns a view of s whose keys are namespaced as prefix + "/" +
// key (prefix + key if prefix already ends in "/"), like PyTorch's
// PrefixStore; sub-groups and restarts use it so their keys cannot collide.
//
// NumKeys counts every key of s, not only those under prefix, as in
// PyTorch (no Store can enumerate its keys). Close marks only the view
// closed: s belongs to its owner, who closes it.
func Prefix(s Store, prefix string) Store {
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return &prefixed{s: s, prefix: prefix, done: make(chan struct{})}
}

type prefixed struct {
	s         Store
	prefix    string
	done      chan struct{} // closed by Close; ends the view's blocked calls
	closeOnce sync.Once
}

func (p *prefixed) isClosed() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// blocking runs a blocking call of s so that Close of the view ends it with
// ErrClosed.
func (p *prefixed) blocking(ctx context.Context, call func(context.Context) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-p.done:
			cancel(ErrClosed)
		case <-ctx.Done():
		}
	}()
	err := call(ctx)
	if err != nil && errors.Is(context.Cause(ctx), ErrClosed) {
		return ErrClosed
	}
	return err
}

func (p *prefixed) key(k string) string { return p.prefix + k }

func (p *prefixed) Set(ctx context.Context, key string, value []byte) error {
	if p.isClosed() {
		return ErrClosed
	}
	return p.s.Set(ctx, p.key(key), value)
}

func (p *prefixed) Get(ctx context.Context, key string) ([]byte, error) {
	if p.isClosed() {
		return nil, ErrClosed
	}
	var v []byte
	err := p.blocking(ctx, func(ctx context.Context) error {
		var err error
		v, err = p.s.Get(ctx, p.key(key))
		return err
	})
	return v, err
}

func (p *prefixed) Add(ctx context.Context, key string, delta int64) (int64, error) {
	if p.isClosed() {
		return 0, ErrClosed
	}
	return p.s.Add(ctx, p.key(key), delta)
}

func (p *prefixed) CompareAndSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error) {
	if p.isClosed() {
		return nil, ErrClosed
	}
	return p.s.CompareAndSet(ctx, p.key(key), expected, desired)
}

func (p *prefixed) Wait(ctx context.Context, keys ...string) error {
	if p.isClosed() {
		return ErrClosed
	}
	full := make([]string, len(keys))
	for i, k := range keys {
		full[i] = p.key(k)
	}
	return p.blocking(ctx, func(ctx context.Context) error { return p.s.Wait(ctx, full...) })
}

func (p *prefixed) Delete(ctx context.Context, key string) (bool, error) {
	if p.isClosed() {
		return false, ErrClosed
	}
	return p.s.Delete(ctx, p.key(key))
}

func (p *prefixed) NumKeys(ctx context.Context) (int64, error) {
	if p.isClosed() {
		return 0, ErrClosed
	}
	return p.s.NumKeys(ctx)
}

func (p *prefixed) Close() error {
	p.closeOnce.Do(func() { close(p.done) })
	return nil
}
