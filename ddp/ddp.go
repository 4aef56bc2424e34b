package ddp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gotrain/gotrain/internal/cpu"
	"github.com/gotrain/gotrain/internal/kernels"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/tensor"
)

// Option configures New.
type Option func(*config)

type config struct {
	bucketCapBytes      int
	firstBucketCapBytes int
	broadcastBuffers    bool
	findUnused          bool
	gradAsBucketView    bool
	hook                CommHook
	bucketHook          BucketHook // if set, used instead of hook
	overlap             *bool      // nil: decided from the group and the CPUs
}

// BucketCapMB sets the bucket size in MiB (PyTorch's bucket_cap_mb,
// default 25). The first bucket stays at 1 MiB unless the cap is smaller.
// It panics if the cap is less than one byte.
func BucketCapMB(mb float64) Option {
	bytes := int(mb * (1 << 20))
	if !(mb > 0) || bytes <= 0 {
		panic(fmt.Sprintf("ddp: BucketCapMB(%v): the cap must be at least one byte", mb))
	}
	return func(c *config) {
		c.bucketCapBytes = bytes
		if c.bucketCapBytes < c.firstBucketCapBytes {
			c.firstBucketCapBytes = c.bucketCapBytes
		}
	}
}

// BroadcastBuffers makes every Forward first copy rank 0's buffers (such as
// BatchNorm running statistics) to all ranks. On by default, as in PyTorch.
func BroadcastBuffers(on bool) Option { return func(c *config) { c.broadcastBuffers = on } }

// FindUnusedParameters lets parameters that a forward pass did not use take
// part with a zero gradient instead of stalling the reduction. Off by
// default, as in PyTorch: a model with unused parameters then gets an error
// from Backward naming them.
func FindUnusedParameters(on bool) Option { return func(c *config) { c.findUnused = on } }

// GradientAsBucketView makes each parameter's Grad a view into its bucket,
// saving a copy in and out of the bucket on every step and the memory of a
// second gradient copy.
func GradientAsBucketView(on bool) Option { return func(c *config) { c.gradAsBucketView = on } }

// OverlapComm decides whether bucket reductions run on a communication
// goroutine while backward goes on (true), or on the goroutine running
// backward, each as soon as its bucket is ready (false).
//
// The default comes from the spare-CPU policy that data.Prefetch's default
// follows too: overlap, unless the group reduces through shared memory
// (Group.SharedMemory: every rank on this host) and the ranks' compute
// threads, ranks × GOTRAIN_NUM_THREADS, take all of the host's CPUs, as the
// launcher arranges by default. A shared-memory reduction is CPU work: with
// no CPU spare, running it "in the background" only takes turns with
// backward and adds thread wake-ups. A reduction over the network mostly
// waits, so it overlaps whatever the CPU count. OverlapComm overrides the
// default either way.
func OverlapComm(on bool) Option { return func(c *config) { c.overlap = &on } }

// WithCommHook replaces the bucket reduction (default AllReduceHook), e.g.
// with FP16CompressHook. It panics if h is nil.
func WithCommHook(h CommHook) Option {
	if h == nil {
		panic("ddp: WithCommHook: nil hook")
	}
	return func(c *config) { c.hook, c.bucketHook = h, nil }
}

// Model is a module wrapped for distributed data-parallel training: after
// each Backward, the gradients of its parameters are averaged across the
// group, with the allreduce of each bucket overlapping the rest of backward.
type Model struct {
	module nn.Module
	group  Group
	cfg    config

	params  []*tensor.Tensor
	names   []string
	buffers []*tensor.Tensor
	numel   []int

	// Everything below is owned by the goroutine running forward and
	// backward; the comm goroutine sees only the jobs sent to it.
	red      *reducer
	buckets  [][]float32
	layouts  [][]BucketParam // per bucket; only with a BucketHook
	rebuilt  bool
	pass     *tensor.Pass
	jobs     []job
	passes   int // synchronised passes begun
	noSync   bool
	deferred error // returned by the next Backward (Forward cannot return one)
	removers []func()
	stats    Stats

	join      *Joiner // the Join m was last attached to (see join.go)
	joinScale float32 // inside a Join: the factor for this pass's averaged gradients

	reducing atomic.Int64 // nanoseconds in the comm hook (on the comm goroutine or inline)

	observer atomic.Pointer[func(BucketSpan)] // see ObserveBuckets; nil: none

	inline        bool            // reduce buckets in the grad hooks, not on a goroutine
	commCtx       context.Context // New's ctx: bounds reductions; cancelled by Close
	inlineFailure passFailure     // with inline: the pass whose reduction failed

	cancel context.CancelFunc // ends in-flight reductions on Close
	work   chan job
	wg     sync.WaitGroup
}

type job struct {
	pass   int // which synchronised pass the bucket belongs to
	bucket int
	buf    []float32
	params []BucketParam // the bucket's layout, for a BucketHook
	last   bool          // the pass's last bucket
	done   chan error
	queued time.Time // set only while an observer is installed
}

// Stats are cumulative timings since New.
type Stats struct {
	// Syncs counts backward passes whose gradients were reduced.
	Syncs int
	// ExposedWait is communication not hidden by backward: the time
	// Backward spent waiting for reductions after the last gradient was
	// computed, plus, when reductions run inline (see OverlapComm), the
	// time they took.
	ExposedWait time.Duration
	// Buckets is the current number of gradient buckets.
	Buckets int
	// Reducing is the total time spent in the comm hook, hidden by
	// backward or not.
	Reducing time.Duration
}

// New wraps module for data-parallel training over g. It checks that every
// rank has the same parameter names and shapes (an error names the first
// difference and each rank's shape) and copies rank 0's parameters and
// buffers to all ranks, so every replica starts identical. Its errors come
// from the group (a peer that differs, fails or times out); an invalid
// option panics when it is made.
//
// ctx also bounds every collective the model runs for its lifetime (the
// reductions of Backward, the broadcasts of Forward): pass the training
// run's context, so that cancelling it (SIGTERM, SIGINT) stops a rank
// waiting for its peers at once, with an error from the next Backward.
func New(ctx context.Context, module nn.Module, g Group, opts ...Option) (*Model, error) {
	cfg := config{
		bucketCapBytes:      DefaultBucketCapBytes,
		firstBucketCapBytes: DefaultFirstBucketCapBytes,
		broadcastBuffers:    true,
		hook:                AllReduceHook,
	}
	for _, o := range opts {
		o(&cfg)
	}
	m := &Model{module: module, group: g, cfg: cfg}
	for _, np := range nn.NamedParameters(module) {
		if !np.Tensor.RequiresGrad() {
			continue
		}
		m.params = append(m.params, np.Tensor)
		m.names = append(m.names, np.Name)
		m.numel = append(m.numel, np.Tensor.Len())
	}
	for _, nb := range nn.NamedBuffers(module) {
		m.buffers = append(m.buffers, nb.Tensor)
	}
	if g.Size() > 1 {
		if err := verifyShapes(ctx, g, m.names, m.params); err != nil {
			return nil, err
		}
		if err := broadcastTensors(ctx, g, append(append([]*tensor.Tensor(nil), m.params...), m.buffers...), 0); err != nil {
			return nil, fmt.Errorf("ddp: broadcasting rank 0's parameters: %w", err)
		}
	}
	order := make([]int, len(m.params))
	for i := range order {
		order[i] = len(m.params) - 1 - i // reverse registration order
	}
	m.setBuckets(assignBuckets(order, m.numel, cfg.firstBucketCapBytes, cfg.bucketCapBytes))
	commCtx, cancel := context.WithCancel(ctx)
	m.cancel, m.commCtx, m.inlineFailure = cancel, commCtx, passFailure{pass: -1}
	if g.Size() > 1 {
		m.inline = !overlapByDefault(g)
		if cfg.overlap != nil {
			m.inline = !*cfg.overlap
		}
		if err := checkSyncBatchNormGroup(module, g, m.inline); err != nil {
			cancel()
			return nil, err
		}
		if !m.inline {
			m.work = make(chan job, 64)
			m.wg.Add(1)
			go m.communicate(commCtx, m.work)
		}
		for i, p := range m.params {
			m.removers = append(m.removers, p.AddGradHook(func(pass *tensor.Pass, _ *tensor.Tensor) {
				m.gradReady(pass, i)
			}))
		}
	}
	return m, nil
}

// setBuckets installs a bucket plan, moving gradient views if needed.
func (m *Model) setBuckets(plans []bucketPlan) {
	m.red = newReducer(plans, len(m.params))
	m.buckets = make([][]float32, len(plans))
	for b, pl := range plans {
		m.buckets[b] = make([]float32, pl.size)
	}
	m.stats.Buckets = len(plans)
	if m.cfg.bucketHook != nil {
		shapes := make([][]int, len(m.params))
		for p, param := range m.params {
			shapes[p] = param.Shape()
		}
		m.layouts = bucketLayouts(plans, shapes)
	}
	if !m.cfg.gradAsBucketView {
		return
	}
	for p, param := range m.params {
		view := tensor.New(m.gradRegion(p), param.Shape()...)
		if old := param.Grad(); old != nil {
			copy(view.Data(), old.Data())
		}
		param.SetGrad(view)
	}
}

// gradRegion is parameter p's slice of its bucket.
func (m *Model) gradRegion(p int) []float32 {
	b, s := m.red.bucketOf[p], m.red.slotOf[p]
	off := m.red.plans[b].offsets[s]
	return m.buckets[b][off : off+m.numel[p]]
}

// ReducesInline reports whether bucket reductions run on the goroutine
// that runs backward (see OverlapComm): by default, when no CPU is spare
// for background work. The data loader's prefetch default follows the
// same policy, so a plain training loop needs no option for it.
func (m *Model) ReducesInline() bool { return m.inline }

// Module returns the wrapped module (for saving a checkpoint).
func (m *Model) Module() nn.Module { return m.module }

// Parameters returns the parameters that DDP synchronises, for the optimizer.
func (m *Model) Parameters() []*tensor.Tensor { return m.params }

// Stats returns cumulative communication statistics.
func (m *Model) Stats() Stats {
	st := m.stats
	st.Reducing = time.Duration(m.reducing.Load())
	return st
}

// Forward runs the wrapped module. With BroadcastBuffers it first copies
// rank 0's buffers to every rank; an error doing so is returned by the next
// Backward, the documented sync point, since Forward returns no error.
func (m *Model) Forward(x *tensor.Tensor) *tensor.Tensor {
	if j := m.joiner(); j != nil {
		m.notifyJoin(j)
	}
	if m.cfg.broadcastBuffers && len(m.buffers) > 0 && m.group.Size() > 1 && m.deferred == nil {
		// Forward has no ctx: New's bounds it, with the group's timeout.
		if err := broadcastTensors(m.commCtx, m.group, m.buffers, m.broadcastRoot()); err != nil {
			m.deferred = fmt.Errorf("ddp: broadcasting buffers in forward: %w", err)
		}
	}
	return m.module.Forward(x)
}

// NoSync runs f with gradient synchronisation off: backward passes inside f
// only accumulate local gradients, and the first synchronised backward after
// it averages the accumulated sum (gradient accumulation, like PyTorch's
// no_sync context manager).
func (m *Model) NoSync(f func() error) error {
	prev := m.noSync
	m.noSync = true
	defer func() { m.noSync = prev }()
	return f()
}

// Close stops the communication goroutine and removes DDP's hooks; the
// module keeps its parameters and gradients. It does not destroy the group.
func (m *Model) Close() error {
	for _, r := range m.removers {
		r()
	}
	m.removers = nil
	m.cancel()
	if m.work != nil {
		close(m.work)
		m.work = nil
	}
	m.wg.Wait()
	return nil
}

// overlapByDefault reports whether reductions should run beside backward
// (see OverlapComm): always over the network, and through shared memory
// only when a CPU is spare.
func overlapByDefault(g Group) bool {
	return !g.SharedMemory() || cpu.Spare(g.Size(), kernels.NumThreads())
}

// passFailure remembers the pass whose reduction failed, so the pass's
// remaining buckets fail at once: the group is broken or stuck, and each
// would otherwise wait out another timeout.
type passFailure struct {
	pass int
	err  error
}

// reduce runs the comm hook on bucket j (or fails it with the pass's
// earlier failure), reports the result on j.done and returns how long the
// hook took.
func (m *Model) reduce(ctx context.Context, j job, f *passFailure) time.Duration {
	if j.pass == f.pass {
		j.done <- f.err
		return 0
	}
	start := time.Now()
	var err error
	if h := m.cfg.bucketHook; h != nil {
		err = h.ReduceBucket(ctx, m.group, Bucket{Index: j.bucket, Last: j.last, Data: j.buf, Params: j.params})
	} else {
		err = m.cfg.hook(ctx, m.group, j.buf)
	}
	d := time.Since(start)
	m.reducing.Add(int64(d))
	if o := m.observer.Load(); o != nil {
		(*o)(BucketSpan{Bucket: j.bucket, Bytes: 4 * len(j.buf), Queued: j.queued, Start: start, End: start.Add(d), Err: err})
	}
	if err != nil {
		f.pass, f.err = j.pass, err
	}
	j.done <- err
	return d
}

// reduceInline reduces bucket j on the goroutine running backward, which
// stands still meanwhile: the time counts as exposed.
func (m *Model) reduceInline(j job) {
	m.stats.ExposedWait += m.reduce(m.commCtx, j, &m.inlineFailure)
}

// communicate reduces buckets in the order they are launched.
func (m *Model) communicate(ctx context.Context, work <-chan job) {
	defer m.wg.Done()
	f := passFailure{pass: -1}
	for j := range work {
		m.reduce(ctx, j, &f)
	}
}

// gradReady is the grad hook: parameter p's gradient is final in pass.
func (m *Model) gradReady(pass *tensor.Pass, p int) {
	if m.noSync {
		return
	}
	if pass != m.pass {
		m.beginPass(pass)
	}
	if m.joinHalted() != nil {
		return // the ranks stopped at uneven inputs: no reduction may start
	}
	m.markReady(p)
}

func (m *Model) beginPass(pass *tensor.Pass) {
	m.pass = pass
	m.passes++
	m.red.reset()
	m.jobs = m.jobs[:0]
	pass.OnFinish(m.finishPass)
	if m.cfg.findUnused {
		for p, param := range m.params {
			if !pass.Reaches(param) {
				m.markReady(p)
			}
		}
	}
}

func (m *Model) markReady(p int) {
	if m.cfg.gradAsBucketView {
		// The bucket holds the gradient itself: let a ZeroGrad that no
		// backward wrote over (an unused parameter's) write its zeros.
		m.params[p].Grad()
	} else {
		dst := m.gradRegion(p)
		if g := m.params[p].Grad(); g != nil && g.Len() == len(dst) {
			copy(dst, g.Data())
		} else {
			clear(dst)
		}
	}
	launch, err := m.red.markReady(p)
	if err != nil {
		if m.deferred == nil {
			m.deferred = err
		}
		return
	}
	for _, b := range launch {
		j := job{pass: m.passes, bucket: b, buf: m.buckets[b], done: make(chan error, 1)}
		if m.layouts != nil {
			j.params, j.last = m.layouts[b], b == len(m.layouts)-1
		}
		if m.observer.Load() != nil {
			j.queued = time.Now()
		}
		m.jobs = append(m.jobs, j)
		if m.inline {
			m.reduceInline(j)
			continue
		}
		m.work <- j
	}
}

// finishPass runs at the end of Backward: it waits for every bucket's
// reduction and makes the averaged gradients visible in each Grad.
func (m *Model) finishPass() error {
	m.pass = nil
	if err := m.joinHalted(); err != nil {
		m.deferred = nil
		return err
	}
	start := time.Now()
	var errs []error
	if e := m.deferred; e != nil {
		errs = append(errs, e)
		m.deferred = nil
	}
	// Receive every result, even after a failure, so no reduction still
	// writes into a bucket when Backward returns.
	var commErr error
	for _, j := range m.jobs {
		if err := <-j.done; err != nil && commErr == nil {
			pl := m.red.plans[j.bucket]
			commErr = fmt.Errorf("ddp: reducing gradient bucket %d (%d parameters, %d bytes): %w",
				j.bucket, len(pl.params), pl.size*4, err)
		}
	}
	if commErr != nil {
		errs = append(errs, commErr)
	}
	m.stats.ExposedWait += time.Since(start)
	if !m.red.allLaunched() {
		var names []string
		for _, p := range m.red.notReady() {
			names = append(names, m.names[p])
		}
		errs = append(errs, fmt.Errorf("ddp: parameters %v received no gradient in this backward pass; "+
			"if the model has unused parameters, pass ddp.FindUnusedParameters(true)", names))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	m.stats.Syncs++
	m.scaleJoinedGradients()
	if !m.cfg.gradAsBucketView {
		for p, param := range m.params {
			src := m.gradRegion(p)
			if g := param.Grad(); g != nil {
				copy(g.Data(), src)
			} else {
				param.SetGrad(tensor.New(append([]float32(nil), src...), param.Shape()...))
			}
		}
	}
	if !m.rebuilt {
		m.rebuilt = true
		if err := m.rebuildBuckets(); err != nil {
			return err
		}
	}
	return nil
}

// rebuildBuckets re-forms the buckets once, after the first iteration, in
// the order gradients actually became ready, so the first bucket fills (and
// its allreduce starts) as early as possible. Rank 0's order is used on
// every rank so they all issue the same collectives.
func (m *Model) rebuildBuckets() error {
	order := make([]int64, len(m.params))
	for i, p := range m.red.observed {
		order[i] = int64(p)
	}
	if err := m.group.Broadcast(m.commCtx, order, m.broadcastRoot()); err != nil {
		return fmt.Errorf("ddp: agreeing on the rebuilt bucket order: %w", err)
	}
	ord := make([]int, len(order))
	seen := make([]bool, len(order))
	for i, p := range order {
		if p < 0 || int(p) >= len(order) || seen[p] {
			return fmt.Errorf("ddp: rank 0 sent an invalid bucket order (parameter %d at %d)", p, i)
		}
		seen[p] = true
		ord[i] = int(p)
	}
	m.setBuckets(assignBuckets(ord, m.numel, m.cfg.firstBucketCapBytes, m.cfg.bucketCapBytes))
	return nil
}
