package ft

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"time"
	"unsafe"
)

// Tags of the heal transfer's point-to-point messages.
const (
	tagHealHeader  = 0x6674_0001
	tagHealPayload = 0x6674_0002
)

// heal moves the training state from q.Source to the members in
// q.Recover over the quorum's group: the data plane's own authenticated
// connections (job token, TLS when configured). The payload travels with
// its length, step and sha256, which the receiver verifies before Load.
// Members that neither serve nor receive go straight to the step, where
// the allreduce waits for the healed members: they pause at most for the
// transfer.
func (m *Manager) heal(ctx context.Context, q *Quorum) error {
	me := m.cfg.ReplicaID
	switch {
	case me == q.Source:
		start := time.Now()
		state, err := m.cfg.Snapshot()
		if err != nil {
			return fmt.Errorf("heal: snapshot the state of step %d to serve %v: %w", m.step, q.Recover, err)
		}
		sum := sha256.Sum256(state)
		hdr := make([]int64, 6)
		hdr[0], hdr[1] = int64(len(state)), m.step
		for i := range 4 {
			hdr[2+i] = int64(binary.LittleEndian.Uint64(sum[8*i:]))
		}
		words := toWords(state)
		for _, id := range q.Recover {
			dst := q.Index(id)
			if err := m.g.Send(ctx, hdr, dst, tagHealHeader); err != nil {
				return fmt.Errorf("heal: send the state header to %s: %w", id, err)
			}
			if err := m.g.Send(ctx, words, dst, tagHealPayload); err != nil {
				return fmt.Errorf("heal: send %d bytes of state to %s: %w", len(state), id, err)
			}
		}
		m.healed(time.Since(start), "served", q, len(state))
	case slices.Contains(q.Recover, me):
		start := time.Now()
		src := q.Index(q.Source)
		hdr := make([]int64, 6)
		if err := m.g.Recv(ctx, hdr, src, tagHealHeader); err != nil {
			return fmt.Errorf("heal: receive the state header from %s: %w", q.Source, err)
		}
		n, step := hdr[0], hdr[1]
		if n < 0 || n > 1<<40 || step != q.MaxStep {
			return fmt.Errorf("heal: %s sent a header for %d bytes at step %d, want step %d", q.Source, n, step, q.MaxStep)
		}
		words := make([]int64, (n+7)/8)
		if err := m.g.Recv(ctx, words, src, tagHealPayload); err != nil {
			return fmt.Errorf("heal: receive %d bytes of state from %s: %w", n, q.Source, err)
		}
		state := fromWords(words)[:n]
		sum := sha256.Sum256(state)
		for i := range 4 {
			if int64(binary.LittleEndian.Uint64(sum[8*i:])) != hdr[2+i] {
				return fmt.Errorf("heal: the %d bytes of state from %s fail their sha256 check", n, q.Source)
			}
		}
		if err := m.cfg.Load(state); err != nil {
			return fmt.Errorf("heal: load the state of step %d from %s: %w", step, q.Source, err)
		}
		m.step = step
		m.healed(time.Since(start), "received", q, int(n))
	}
	return nil
}

func (m *Manager) healed(d time.Duration, how string, q *Quorum, n int) {
	m.mu.Lock()
	m.stats.Heals++
	m.stats.HealPause = append(m.stats.HealPause, d)
	m.mu.Unlock()
	m.log.Info("ft: heal "+how, "source", q.Source, "recover", q.Recover, "step", q.MaxStep, "bytes", n, "took", d)
}

// toWords copies b into int64 words, the zero-padded form the data plane
// carries.
func toWords(b []byte) []int64 {
	w := make([]int64, (len(b)+7)/8)
	copy(fromWords(w), b)
	return w
}

// fromWords views w's memory as bytes.
func fromWords(w []int64) []byte {
	if len(w) == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), len(w)*8)
}
