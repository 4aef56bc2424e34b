package data

import (
	"fmt"
	"iter"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/gotrain/gotrain/tensor"
)

// Batch is a batch of examples assembled by a Loader.
//
// X, Y, Target, Inputs, Targets and Indices live in the Loader's reusable
// buffers: they are valid until the loop body that received the batch
// returns. Copy what must outlive it (tensor.Clone, slices.Clone).
type Batch struct {
	// X holds the features, of shape [n, example shape...]; nil in a
	// batch of a SequenceDataset.
	X *tensor.Tensor
	// Y holds the n labels; nil in a batch of a SequenceDataset or a
	// TargetDataset.
	Y []int
	// Target holds a TargetDataset's float targets, of shape [n, target
	// shape...]; nil otherwise.
	Target *tensor.Tensor
	// Inputs holds a SequenceDataset's token ids, [n, T] row-major
	// (Inputs[b*T+t] is position t of example b); nil otherwise.
	Inputs []int
	// Targets holds the per-position targets, laid out as Inputs.
	Targets []int
	// T is the sequence length of Inputs and Targets (0 otherwise).
	T int
	// Indices holds the n dataset indices the examples came from.
	Indices []int
}

// Len returns the number of examples in the batch.
func (b Batch) Len() int { return len(b.Indices) }

// Loader assembles batches of a Dataset in the order of a Sampler.
//
// With prefetching (the default when a CPU is spare: see Prefetch), a
// background goroutine fills the next batches while the training loop runs. Buffers are reused: a Loader holds
// Prefetch(n)+1 batches in memory, whatever the number of epochs. A Loader
// may be ranged over again and again, but by one loop at a time.
type Loader struct {
	ds        Dataset // the dataset batched: one of ds, seq and tds
	seq       SequenceDataset
	tds       TargetDataset
	seqLen    int
	sampler   Sampler
	batchSize int
	cfg       config
	shape     []int // example shape
	feature   int   // values per example
	tshape    []int // target shape of a TargetDataset
	tfeature  int   // values per target

	// active guards against two loops ranging over Batches at once, which
	// would share buffers.
	active atomic.Bool
	// bufs are the reusable batch buffers, created on first use.
	bufs []*batchBuffer
	// order is scratch for the epoch's indices.
	order []int
	// load is Load's buffer, grown to the largest batch it assembled.
	load *batchBuffer
}

type batchBuffer struct {
	x       []float32
	y       []int
	target  []float32 // [batchSize, tfeature] of a TargetDataset
	inputs  []int     // [batchSize, seqLen] of a SequenceDataset
	targets []int
	indices []int
}

// NewLoader returns a Loader of batches of batchSize examples of ds, in the
// order sampler gives. Options: DropLast (default false), Prefetch
// (default 2, or 0 when no CPU is spare for prefetching: see Prefetch),
// Workers (default 1). It
// panics if ds or sampler is nil, batchSize <= 0 or an option is not one of
// these.
func NewLoader(ds Dataset, batchSize int, sampler Sampler, opts ...Option) *Loader {
	if ds == nil || sampler == nil {
		panic("data: NewLoader: nil dataset or sampler")
	}
	cfg := loaderConfig("NewLoader", batchSize, opts)
	shape := append([]int(nil), ds.Shape()...)
	feature := 1
	for _, d := range shape {
		feature *= d
	}
	return &Loader{ds: ds, sampler: sampler, batchSize: batchSize, cfg: cfg, shape: shape, feature: feature}
}

// NewSequenceLoader returns a Loader of batches of batchSize sequences of
// ds, in the order sampler gives: each Batch has Inputs and Targets of
// [n, ds.SeqLen()] token ids. It takes NewLoader's options and panics
// like it.
func NewSequenceLoader(ds SequenceDataset, batchSize int, sampler Sampler, opts ...Option) *Loader {
	if ds == nil || sampler == nil {
		panic("data: NewSequenceLoader: nil dataset or sampler")
	}
	cfg := loaderConfig("NewSequenceLoader", batchSize, opts)
	if ds.SeqLen() < 1 {
		panic(fmt.Sprintf("data: NewSequenceLoader: sequence length %d must be positive", ds.SeqLen()))
	}
	return &Loader{seq: ds, seqLen: ds.SeqLen(), sampler: sampler, batchSize: batchSize, cfg: cfg}
}

func loaderConfig(ctor string, batchSize int, opts []Option) config {
	if batchSize <= 0 {
		panic(fmt.Sprintf("data: %s: batch size %d must be positive", ctor, batchSize))
	}
	return config{prefetch: -1}.apply(ctor, opts, "DropLast", "Prefetch", "Workers").resolvePrefetch()
}

// Len returns the number of batches in one full epoch.
func (l *Loader) Len() int { return l.numBatches(l.sampler.Len()) }

// BatchSize returns the number of examples in a full batch.
func (l *Loader) BatchSize() int { return l.batchSize }

func (l *Loader) numBatches(samples int) int {
	if l.cfg.dropLast {
		return samples / l.batchSize
	}
	return (samples + l.batchSize - 1) / l.batchSize
}

// Batches returns an iterator over one epoch's batches: each time it is
// ranged over, it asks the sampler for the current epoch's indices. Each
// batch is valid until the loop body that received it returns. Breaking
// out of the loop (or a panic in it) stops the background goroutine before
// the loop statement completes.
//
// If the sampler is a ResumableSampler, each batch is counted as seen
// (Advance) as it is handed to the loop body. A panic in the Dataset's
// Example is re-raised in the ranging goroutine.
func (l *Loader) Batches() iter.Seq[Batch] {
	return func(yield func(Batch) bool) {
		if !l.active.CompareAndSwap(false, true) {
			panic("data: Loader.Batches ranged over by two loops at once")
		}
		defer l.active.Store(false)

		l.order = l.sampler.AppendIndices(l.order[:0])
		nb := l.numBatches(len(l.order))
		if nb == 0 {
			return
		}
		resumable, _ := l.sampler.(ResumableSampler)
		if l.cfg.prefetch == 0 || nb == 1 {
			l.runSync(nb, resumable, yield)
			return
		}
		l.runPrefetch(nb, resumable, yield)
	}
}

// buffers returns n batch buffers, allocating the missing ones.
func (l *Loader) buffers(n int) []*batchBuffer {
	for len(l.bufs) < n {
		b := &batchBuffer{indices: make([]int, l.batchSize)}
		if l.seq != nil {
			b.inputs = make([]int, l.batchSize*l.seqLen)
			b.targets = make([]int, l.batchSize*l.seqLen)
		} else {
			b.x = make([]float32, l.batchSize*l.feature)
			if l.tds != nil {
				b.target = make([]float32, l.batchSize*l.tfeature)
			} else {
				b.y = make([]int, l.batchSize)
			}
		}
		l.bufs = append(l.bufs, b)
	}
	return l.bufs[:n]
}

// batchIndices returns the indices of batch k of the epoch.
func (l *Loader) batchIndices(k int) []int {
	return l.order[k*l.batchSize : min((k+1)*l.batchSize, len(l.order))]
}

// fill copies the examples at idx into b, on Workers goroutines.
func (l *Loader) fill(b *batchBuffer, idx []int) {
	if n := min(l.cfg.workers, len(idx)); n > 1 {
		l.fillParallel(b, idx, n)
		return
	}
	l.fillRange(b, idx, 0, len(idx))
}

// fillParallel fills idx in n runs, one per goroutine. A panic in one of
// them is re-raised here, in the goroutine that assembles the batch, so
// that the Loader reports it as it does any other.
func (l *Loader) fillParallel(b *batchBuffer, idx []int, n int) {
	var wg sync.WaitGroup
	var once sync.Once
	var panicked any
	for w := range n {
		lo, hi := w*len(idx)/n, (w+1)*len(idx)/n
		wg.Go(func() {
			defer func() {
				if r := recover(); r != nil {
					once.Do(func() { panicked = r })
				}
			}()
			l.fillRange(b, idx, lo, hi)
		})
	}
	wg.Wait()
	if panicked != nil {
		panic(panicked)
	}
}

// fillRange copies the examples at idx[from:to] into their places in b.
func (l *Loader) fillRange(b *batchBuffer, idx []int, from, to int) {
	for j := from; j < to; j++ {
		i := idx[j]
		switch {
		case l.seq != nil:
			lo, hi := j*l.seqLen, (j+1)*l.seqLen
			l.seq.Sequence(i, b.inputs[lo:hi], b.targets[lo:hi])
		case l.tds != nil:
			l.tds.Example(i, b.x[j*l.feature:(j+1)*l.feature], b.target[j*l.tfeature:(j+1)*l.tfeature])
		default:
			b.y[j] = l.ds.Example(i, b.x[j*l.feature:(j+1)*l.feature])
		}
		b.indices[j] = i
	}
}

func (l *Loader) batch(b *batchBuffer, n int) Batch {
	if l.seq != nil {
		return Batch{Inputs: b.inputs[:n*l.seqLen], Targets: b.targets[:n*l.seqLen], T: l.seqLen, Indices: b.indices[:n]}
	}
	shape := make([]int, 0, 1+len(l.shape))
	shape = append(append(shape, n), l.shape...)
	if l.tds != nil {
		tshape := append([]int{n}, l.tshape...)
		return Batch{X: tensor.New(b.x[:n*l.feature], shape...), Target: tensor.New(b.target[:n*l.tfeature], tshape...), Indices: b.indices[:n]}
	}
	return Batch{X: tensor.New(b.x[:n*l.feature], shape...), Y: b.y[:n], Indices: b.indices[:n]}
}

func (l *Loader) runSync(nb int, resumable ResumableSampler, yield func(Batch) bool) {
	b := l.buffers(1)[0]
	for k := range nb {
		idx := l.batchIndices(k)
		l.fill(b, idx)
		if resumable != nil {
			resumable.Advance(len(idx))
		}
		if !yield(l.batch(b, len(idx))) {
			return
		}
	}
}

// runPrefetch fills batches on a producer goroutine. Buffers circulate
// between two channels: free (owned by nobody) and ready (filled, in
// order). The buffer held by the loop body is in neither, so it cannot be
// overwritten until the body returns.
func (l *Loader) runPrefetch(nb int, resumable ResumableSampler, yield func(Batch) bool) {
	bufs := l.buffers(l.cfg.prefetch + 1)
	free := make(chan *batchBuffer, len(bufs))
	for _, b := range bufs {
		free <- b
	}
	ready := make(chan *batchBuffer, l.cfg.prefetch)
	stop := make(chan struct{})
	exited := make(chan struct{})
	var workerPanic string // written before ready is closed

	go func() {
		defer close(exited)
		defer close(ready)
		defer func() {
			if r := recover(); r != nil {
				workerPanic = fmt.Sprintf("data: Loader: panic while assembling a batch: %v\n\nworker goroutine stack:\n%s", r, debug.Stack())
			}
		}()
		for k := range nb {
			var b *batchBuffer
			select {
			case b = <-free:
			case <-stop:
				return
			}
			l.fill(b, l.batchIndices(k))
			select {
			case ready <- b:
			case <-stop:
				return
			}
		}
	}()
	defer func() {
		close(stop)
		<-exited
	}()

	for k := range nb {
		b, ok := <-ready
		if !ok {
			<-exited
			panic(workerPanic)
		}
		n := len(l.batchIndices(k))
		if resumable != nil {
			resumable.Advance(n)
		}
		if !yield(l.batch(b, n)) {
			return
		}
		free <- b // never blocks: free has room for every buffer
	}
}

// Examples returns the number of examples (or sequences) in the dataset
// the Loader batches, whatever part of it the sampler gives.
func (l *Loader) Examples() int {
	switch {
	case l.seq != nil:
		return l.seq.Len()
	case l.tds != nil:
		return l.tds.Len()
	}
	return l.ds.Len()
}

// Load assembles the batch of the examples at idx, for a loop that picks
// each step's examples itself (ddp/ft's Sampler, whose share per replica
// changes with the membership): it assembles nothing ahead, so no batch
// is ever built for a membership that has changed. idx may hold more
// than BatchSize examples. The batch is valid until the next Load.
func (l *Loader) Load(idx []int) Batch {
	if l.active.Load() {
		panic("data: Loader.Load while Batches is ranged over")
	}
	if l.load == nil || len(l.load.indices) < len(idx) {
		n := max(len(idx), l.batchSize)
		b := &batchBuffer{indices: make([]int, n)}
		switch {
		case l.seq != nil:
			b.inputs, b.targets = make([]int, n*l.seqLen), make([]int, n*l.seqLen)
		case l.tds != nil:
			b.x, b.target = make([]float32, n*l.feature), make([]float32, n*l.tfeature)
		default:
			b.x, b.y = make([]float32, n*l.feature), make([]int, n)
		}
		l.load = b
	}
	l.fill(l.load, idx)
	return l.batch(l.load, len(idx))
}
