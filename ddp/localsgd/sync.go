package localsgd

import (
	"context"
	"fmt"
	"math"
	"unsafe"

	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/internal/kernels"
	"github.com/gotrain/gotrain/tensor"
)

// fragment is a contiguous run of parameters that syncs together.
type fragment struct {
	index  int
	lo, hi int // parameter indices [lo, hi)
	numel  int
	// phase is the step residue (mod h) at which it syncs.
	phase int
	// global is θ_global of its parameters, flat (DiLoCo only).
	global []float32
	// send is what its reduction sends and then holds: the parameters
	// (LocalSGD) or the outer gradient (DiLoCo), and after apply's
	// finish, their average.
	send []float32
	// words and all hold the bfloat16 outer gradient and every rank's of
	// it, two values per word: the group moves 32-bit elements.
	words, all []int32
	pending    *inflight
}

// split cuts params into f contiguous fragments of about equal size
// (each fragment ends at the first parameter that takes the running
// total to its share, leaving a parameter for every later fragment),
// syncing h/f steps apart.
func split(params []*tensor.Tensor, f, h int) []*fragment {
	total := 0
	for _, p := range params {
		total += p.Len()
	}
	frags := make([]*fragment, f)
	lo, sum := 0, 0
	for k := range f {
		hi := lo + 1
		sum += params[lo].Len()
		target := (k + 1) * total / f
		for hi < len(params)-(f-1-k) && sum < target {
			sum += params[hi].Len()
			hi++
		}
		if k == f-1 {
			for ; hi < len(params); hi++ {
				sum += params[hi].Len()
			}
		}
		fr := &fragment{index: k, lo: lo, hi: hi, phase: ((k + 1) * h / f) % h}
		for i := lo; i < hi; i++ {
			fr.numel += params[i].Len()
		}
		fr.send = make([]float32, fr.numel)
		frags[k] = fr
		lo = hi
	}
	return frags
}

// inflight is a fragment's reduction under way or done.
type inflight struct {
	applyAt      int64 // the step at whose end it is applied
	contributors int
	wait         func(ctx context.Context) error // nil once waited for
	err          error
	finished     bool // send holds the average
}

// asyncGroup is a group that queues collectives in call order and runs
// them in the background (*distributed.Group).
type asyncGroup interface {
	AllReduceAsync(ctx context.Context, buf any, op distributed.ReduceOp) *distributed.Work
	AllGatherAsync(ctx context.Context, dst, src any) *distributed.Work
}

// AfterStep counts an inner step (call it after each optimizer step,
// every rank at every step) and syncs the fragments due at its end: it
// first applies a delayed reduction due now, then starts every fragment
// whose turn it is, applying it at once unless Delay defers it. An error
// is the group's (a failed or stopped peer): the replica is then as the
// last successful sync left it plus its own steps.
func (m *Model) AfterStep(ctx context.Context) error {
	m.step++
	for _, f := range m.frags {
		if f.pending != nil && f.pending.applyAt <= m.step {
			if err := m.apply(ctx, f); err != nil {
				return err
			}
		}
	}
	for _, f := range m.frags {
		if int(m.step%int64(m.h)) != f.phase {
			continue
		}
		if err := m.start(ctx, f, m.step+int64(m.cfg.delay)); err != nil {
			return err
		}
		if m.cfg.delay == 0 {
			if err := m.apply(ctx, f); err != nil {
				return err
			}
		}
	}
	return nil
}

// Sync syncs the whole model now, whatever the schedule, as every rank
// must at the same point: it applies a reduction in flight, then syncs
// every fragment at once. After it every rank holds the same parameters
// (θ_global for DiLoCo with Alpha 0, the average for LocalSGD): call it
// at the end of training, before evaluating or saving the model. The
// schedule goes on as before.
func (m *Model) Sync(ctx context.Context) error {
	for _, f := range m.frags {
		if f.pending != nil {
			if err := m.apply(ctx, f); err != nil {
				return err
			}
		}
	}
	for _, f := range m.frags {
		if err := m.start(ctx, f, m.step); err != nil {
			return err
		}
		if err := m.apply(ctx, f); err != nil {
			return err
		}
	}
	return nil
}

// start begins fragment f's reduction, to be applied at the end of step
// applyAt.
func (m *Model) start(ctx context.Context, f *fragment, applyAt int64) error {
	off := 0
	for i := f.lo; i < f.hi; i++ {
		p := m.params[i].Data()
		if m.diloco {
			g := f.global[off : off+len(p)]
			d := f.send[off : off+len(p)]
			for j := range p {
				d[j] = g[j] - p[j]
			}
		} else {
			copy(f.send[off:], p)
		}
		off += len(p)
	}
	if m.silent {
		clear(f.send) // a replica holding a copy of a peer's adds nothing of its own
	}
	if m.trace != nil {
		m.trace(m.step, f.index, "start")
	}
	pf := &inflight{applyAt: applyAt, contributors: m.contributors}
	f.pending = pf
	m.stats.Syncs++
	async := m.cfg.delay > 0
	if m.cfg.bf16 {
		nw := (f.numel + 1) / 2
		if f.words == nil {
			f.words = make([]int32, nw)
			f.all = make([]int32, nw*m.g.Size())
		}
		encodeBF16(halves(f.words, 2*nw), f.send)
		m.stats.SentBytes += 2 * int64(f.numel)
		pf.wait = m.collective(ctx, async, func(ag asyncGroup) *distributed.Work {
			return ag.AllGatherAsync(ctx, f.all, f.words)
		}, func() error { return m.g.AllGather(ctx, f.all, f.words) })
	} else {
		m.stats.SentBytes += 4 * int64(f.numel)
		pf.wait = m.collective(ctx, async, func(ag asyncGroup) *distributed.Work {
			return ag.AllReduceAsync(ctx, f.send, distributed.Sum)
		}, func() error { return m.g.AllReduce(ctx, f.send, distributed.Sum) })
	}
	return nil
}

// collective runs a reduction now, or, if async, in the background
// (on the group's queue if it has one), returning how to wait for it.
func (m *Model) collective(ctx context.Context, async bool, queue func(asyncGroup) *distributed.Work, run func() error) func(context.Context) error {
	if !async {
		err := run()
		return func(context.Context) error { return err }
	}
	if ag, ok := m.g.(asyncGroup); ok {
		return queue(ag).Wait
	}
	done := make(chan error, 1)
	go func() { done <- run() }()
	return func(wctx context.Context) error {
		select {
		case err := <-done:
			return err
		case <-wctx.Done():
			return wctx.Err()
		}
	}
}

// finish waits for f's reduction and turns it into the average in
// f.send. It runs once per reduction; a later call returns its error.
func (m *Model) finish(ctx context.Context, f *fragment) error {
	pf := f.pending
	if pf.finished || pf.err != nil {
		return pf.err
	}
	if err := pf.wait(ctx); err != nil {
		pf.err = fmt.Errorf("localsgd: syncing fragment %d at step %d: %w", f.index, m.step, err)
		return pf.err
	}
	c := float32(pf.contributors)
	if m.cfg.bf16 {
		nw := len(f.words)
		clear(f.send)
		for r := range m.g.Size() { // rank order: the same sum on every rank
			decodeAddBF16(f.send, halves(f.all[r*nw:(r+1)*nw], f.numel))
		}
	}
	for i := range f.send {
		f.send[i] /= c
	}
	pf.finished = true
	return nil
}

// apply finishes f's reduction and brings the replica's fragment to it:
// the average for LocalSGD; for DiLoCo, the outer optimizer's step of
// θ_global with the averaged outer gradient, merged by Alpha. After the
// last fragment the buffers are averaged.
func (m *Model) apply(ctx context.Context, f *fragment) error {
	if err := m.finish(ctx, f); err != nil {
		return err
	}
	m.applyFinished(f)
	if f.index == len(m.frags)-1 {
		return m.averageBuffers(ctx)
	}
	return nil
}

// applyFinished brings the replica's fragment f to its finished
// reduction; no collective.
func (m *Model) applyFinished(f *fragment) {
	if m.trace != nil {
		m.trace(m.step, f.index, "apply")
	}
	if m.diloco {
		off := 0
		for i, g := range m.globals {
			if i < f.lo || i >= f.hi {
				g.SetGrad(nil) // outer steps only this fragment
				continue
			}
			n := g.Len()
			g.SetGrad(tensor.New(f.send[off:off+n], g.Shape()...))
			off += n
		}
		m.outer.Step()
		for _, g := range m.globals[f.lo:f.hi] {
			g.SetGrad(nil)
		}
	}
	src := f.send
	if m.diloco {
		src = f.global
	}
	off := 0
	a := float32(m.cfg.alpha)
	for i := f.lo; i < f.hi; i++ {
		p := m.params[i].Data()
		s := src[off : off+len(p)]
		if a == 0 {
			copy(p, s)
		} else {
			for j := range p {
				p[j] = a*p[j] + (1-a)*s[j]
			}
		}
		off += len(p)
	}
	f.pending = nil
}

// averageBuffers averages the module's buffers (BatchNorm's running
// statistics) over the contributors.
func (m *Model) averageBuffers(ctx context.Context) error {
	if len(m.buffers) == 0 || m.g.Size() == 1 {
		return nil
	}
	n := 0
	for _, b := range m.buffers {
		n += b.Len()
	}
	flat := make([]float32, 0, n)
	for _, b := range m.buffers {
		flat = append(flat, b.Data()...)
	}
	m.stats.SentBytes += 4 * int64(n)
	if err := m.g.AllReduce(ctx, flat, distributed.Sum); err != nil {
		return fmt.Errorf("localsgd: averaging the buffers at step %d: %w", m.step, err)
	}
	c := float32(m.contributors)
	off := 0
	for _, b := range m.buffers {
		d := b.Data()
		for j := range d {
			d[j] = flat[off+j] / c
		}
		off += len(d)
	}
	return nil
}

// halves views 32-bit words as the 16-bit values packed in them, n of
// them (two per word, in memory order).
func halves(w []int32, n int) []uint16 {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&w[0])), 2*len(w))[:n]
}

// encodeBF16 rounds src to bfloat16 (nearest even) into dst, zeroing a
// last unused half.
func encodeBF16(dst []uint16, src []float32) {
	for i, v := range src {
		dst[i] = kernels.RoundBF16Bits(math.Float32bits(v))
	}
	for i := len(src); i < len(dst); i++ {
		dst[i] = 0
	}
}

// decodeAddBF16 adds the bfloat16 values src to dst.
func decodeAddBF16(dst []float32, src []uint16) {
	for i, h := range src {
		dst[i] += math.Float32frombits(uint32(h) << 16)
	}
}
