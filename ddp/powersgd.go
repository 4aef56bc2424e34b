package ddp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/internal/kernels"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// PowerSGDConfig holds PowerSGD's knobs, named after the fields of
// PyTorch's PowerSGDState. DefaultPowerSGDConfig gives PyTorch's defaults.
type PowerSGDConfig struct {
	// Rank is the rank of the approximation of each gradient matrix
	// (matrix_approximation_rank): the lower, the stronger the
	// compression. At least 1; 1, 2 or 4 are usual.
	Rank int
	// StartIter is the number of steps reduced by plain float32
	// allreduce before compression starts (start_powerSGD_iter): the
	// early steps, when the trajectory is most sensitive to inaccurate
	// gradients.
	StartIter int
	// MinCompressionRate: an n×m gradient is compressed only if
	// (n+m)·Rank·MinCompressionRate < n·m; others (and all vectors,
	// such as biases) are allreduced uncompressed, in one batch per
	// bucket (min_compression_rate).
	MinCompressionRate float64
	// ErrorFeedback adds to each step's gradient what the previous
	// step's compression lost on this rank (use_error_feedback).
	ErrorFeedback bool
	// WarmStart starts each step's power iteration from the previous
	// step's Q instead of a fresh random matrix (warm_start).
	WarmStart bool
	// Epsilon is added to each column's norm when orthogonalising
	// (orthogonalization_epsilon); with 0 an all-zero column stays zero.
	Epsilon float64
	// Seed draws the random initial Q matrices, the same on every rank.
	Seed uint64
}

// DefaultPowerSGDConfig returns PyTorch's defaults: rank 1, compression
// from step 1000, minimum compression rate 2, error feedback and warm
// start on, no epsilon, seed 0.
func DefaultPowerSGDConfig() PowerSGDConfig {
	return PowerSGDConfig{Rank: 1, StartIter: 1000, MinCompressionRate: 2, ErrorFeedback: true, WarmStart: true}
}

// Validate reports the first knob out of range, naming it.
func (c PowerSGDConfig) Validate() error {
	switch {
	case c.Rank < 1:
		return fmt.Errorf("ddp: PowerSGD rank %d: want at least 1", c.Rank)
	case c.StartIter < 0:
		return fmt.Errorf("ddp: PowerSGD start iteration %d: want 0 or more", c.StartIter)
	case !(c.MinCompressionRate >= 0) || math.IsInf(c.MinCompressionRate, 0):
		return fmt.Errorf("ddp: PowerSGD minimum compression rate %v: want a finite number ≥ 0", c.MinCompressionRate)
	case !(c.Epsilon >= 0) || math.IsInf(c.Epsilon, 0):
		return fmt.Errorf("ddp: PowerSGD orthogonalisation epsilon %v: want a finite number ≥ 0", c.Epsilon)
	}
	return nil
}

// PowerSGD is the PowerSGD gradient compression of Vogels et al. (2019), as
// PyTorch's powerSGD_hook does it: a BucketHook (install it with
// WithBucketHook) that allreduces each gradient matrix M (a tensor of
// shape n×…, viewed as n rows) as two thin matrices, P = M·Q (n×r) and
// Q = Mᵀ·P (m×r), and applies their product P·Qᵀ, the rank-r
// approximation of the ranks' average gradient a step of power iteration
// finds. With error feedback, what the approximation misses is added to
// the next step's gradient on each rank, so nothing is lost, only
// delayed.
//
// Per bucket and step it runs two allreduces: one of the uncompressed
// gradients together with the Ps, one of the Qs. The result is identical
// on every rank: P and Q are reduced by the group, orthogonalised and
// multiplied out by the same code on every rank. Its state (the step
// count, the Q matrices of the warm start, each rank's error) is kept per
// parameter, so it survives DDP's bucket rebuild, and goes into a training
// checkpoint through StateDict and LoadStateDict (GatherState first, on
// every rank, to save every rank's error).
type PowerSGD struct {
	cfg PowerSGDConfig

	mu     sync.Mutex // a hook call, a save or a load at a time
	iter   int        // steps begun: the last bucket of each increments it
	q      map[int][]float32
	errs   map[int][]float32 // this rank's error, per parameter
	rank   int               // this rank, as the last hook call saw it (-1 before)
	before int64             // gradient elements reduced while compressing
	after  int64             // elements sent for them

	// From GatherState: every rank's error, by rank, at step gatheredAt.
	gathered   []map[int][]float32
	gatheredAt int
	// From LoadStateDict: every saved rank's error, by rank, until the
	// first compressed step picks this rank's.
	pending []map[int][]float32

	// Scratch, reused across buckets.
	input []float32 // the bucket before compression, for the error
	send  []float32 // uncompressed gradients, then the Ps
	qs    []float32 // the Qs
}

// NewPowerSGD returns a PowerSGD hook with the knobs of cfg, or an error
// naming the first one out of range.
func NewPowerSGD(cfg PowerSGDConfig) (*PowerSGD, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &PowerSGD{cfg: cfg, q: map[int][]float32{}, errs: map[int][]float32{}, rank: -1, gatheredAt: -1}, nil
}

// Config returns the knobs the hook was made with.
func (p *PowerSGD) Config() PowerSGDConfig { return p.cfg }

// Iter returns the number of steps the hook has begun.
func (p *PowerSGD) Iter() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.iter
}

// CompressionStats returns the gradient elements the compressed steps
// reduced and the elements they sent for them (per rank and allreduce, as
// PyTorch's compression_stats counts): their ratio is the compression rate.
func (p *PowerSGD) CompressionStats() (before, after int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.before, p.after
}

// matrix is one gradient of a bucket viewed as rows×cols, compressed to
// rank r, with its P (rows×r) and Q (cols×r) in the scratch buffers.
type matrix struct {
	param            int
	data             []float32
	rows, cols, r    int
	pOff, qOff       int
	uncompressedSize int
}

// ReduceBucket implements BucketHook.
func (p *PowerSGD) ReduceBucket(ctx context.Context, g Group, b Bucket) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rank = g.Rank()
	iter := p.iter
	if b.Last {
		p.iter++
		p.gathered = nil // a step on: stale, and world × the model's size
	}
	if iter < p.cfg.StartIter {
		return g.AllReduce(ctx, b.Data, distributed.Avg)
	}
	if len(b.Params) == 0 && len(b.Data) > 0 {
		return errors.New("ddp: PowerSGD: the bucket has no parameter layout (install the hook with WithBucketHook)")
	}
	if p.pending != nil {
		if err := p.adoptPending(g); err != nil {
			return err
		}
	}
	if p.cfg.ErrorFeedback {
		for _, bp := range b.Params {
			grad := b.Data[bp.Offset : bp.Offset+numel(bp.Shape)]
			e := p.errs[bp.Param]
			if len(e) != len(grad) {
				p.errs[bp.Param] = make([]float32, len(grad))
				continue
			}
			for i, v := range e {
				grad[i] += v
			}
		}
		p.input = append(p.input[:0], b.Data...)
	}

	// Sort the gradients into matrices worth compressing and the rest,
	// which go first in the buffer of the first allreduce.
	var mats []matrix
	var plain []BucketParam
	nPlain, nP, nQ := 0, 0, 0
	for _, bp := range b.Params {
		size := numel(bp.Shape)
		if len(bp.Shape) >= 2 && size > 0 {
			rows := bp.Shape[0]
			cols := size / rows
			r := min(rows, cols, p.cfg.Rank)
			if float64((rows+cols)*r)*p.cfg.MinCompressionRate < float64(size) {
				mats = append(mats, matrix{param: bp.Param, data: b.Data[bp.Offset : bp.Offset+size],
					rows: rows, cols: cols, r: r, uncompressedSize: size})
				continue
			}
		}
		plain = append(plain, bp)
		nPlain += size
	}
	for i := range mats {
		mats[i].pOff, mats[i].qOff = nPlain+nP, nQ
		nP += mats[i].rows * mats[i].r
		nQ += mats[i].cols * mats[i].r
	}
	p.before += int64(len(b.Data))
	p.after += int64(nPlain + nP + nQ)
	p.send = grow(p.send, nPlain+nP)
	p.qs = grow(p.qs, nQ)
	off := 0
	for _, bp := range plain {
		off += copy(p.send[off:], b.Data[bp.Offset:bp.Offset+numel(bp.Shape)])
	}

	// P = M·Q from a Q that is orthonormal: the previous step's (warm
	// start) or a random one.
	for _, m := range mats {
		q := p.qs[m.qOff : m.qOff+m.cols*m.r]
		if prev := p.q[m.param]; p.cfg.WarmStart && len(prev) == len(q) {
			copy(q, prev)
		} else {
			randomQ(q, p.cfg.Seed, iter, m.param)
		}
		orthogonalize(q, m.cols, m.r, p.cfg.Epsilon)
		kernels.Sgemm(false, false, m.rows, m.r, m.cols, 1, m.data, m.cols, q, m.r, 0, p.send[m.pOff:], m.r)
	}
	if err := g.AllReduce(ctx, p.send, distributed.Sum); err != nil {
		return err
	}
	off = 0
	world := float32(g.Size())
	for _, bp := range plain {
		grad := b.Data[bp.Offset : bp.Offset+numel(bp.Shape)]
		for i, v := range p.send[off : off+len(grad)] {
			grad[i] = v / world
		}
		off += len(grad)
	}

	// Q = Mᵀ·P from the ranks' summed P, orthonormalised; then the
	// ranks' average Q.
	for _, m := range mats {
		pm := p.send[m.pOff : m.pOff+m.rows*m.r]
		orthogonalize(pm, m.rows, m.r, p.cfg.Epsilon)
		kernels.Sgemm(true, false, m.cols, m.r, m.rows, 1, m.data, m.cols, pm, m.r, 0, p.qs[m.qOff:], m.r)
	}
	if len(mats) > 0 {
		if err := g.AllReduce(ctx, p.qs, distributed.Avg); err != nil {
			return err
		}
	}

	// M ≈ P·Qᵀ, the same on every rank.
	for _, m := range mats {
		q := p.qs[m.qOff : m.qOff+m.cols*m.r]
		outer(m.data, p.send[m.pOff:m.pOff+m.rows*m.r], q, m.rows, m.cols, m.r)
		if p.cfg.WarmStart {
			p.q[m.param] = append(p.q[m.param][:0], q...)
		}
	}
	if !p.cfg.WarmStart {
		clear(p.q)
	}
	if p.cfg.ErrorFeedback {
		for _, bp := range b.Params {
			n := numel(bp.Shape)
			e := p.errs[bp.Param]
			in, out := p.input[bp.Offset:bp.Offset+n], b.Data[bp.Offset:bp.Offset+n]
			for i := range e {
				e[i] = in[i] - out[i]
			}
		}
	}
	return nil
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

// randomQ fills q with standard normal values drawn from a stream that
// depends only on the seed, the step and the parameter: the same on every
// rank, and after a resume, without a generator state to save.
func randomQ(q []float32, seed uint64, iter, param int) {
	rng := rand.New(rand.NewPCG(seed, uint64(iter)<<32|uint64(uint32(param))))
	for i := range q {
		q[i] = float32(rng.NormFloat64())
	}
}

// orthogonalize makes the r columns of the row-major rows×r matrix a
// orthonormal by Gram-Schmidt, as PyTorch's _orthogonalize: each column,
// rid of its components along the columns before it, is divided by its
// norm plus eps. The components are removed twice ("twice is enough",
// Giraud et al. 2005): once a column is (nearly) dependent on the ones
// before it, as when a gradient's rank is below the approximation rank,
// one pass leaves rounding noise that is not orthogonal to them, and the
// noise, normalised, would add to the update what the gradient does not
// hold. A zero column stays zero rather than becoming NaN. Sums run in
// float64 in a fixed order, so every rank gets the same bits.
func orthogonalize(a []float32, rows, r int, eps float64) {
	for c := 0; c < r; c++ {
		for range 2 {
			for d := 0; d < c; d++ {
				var dot float64
				for i := 0; i < rows; i++ {
					dot += float64(a[i*r+c]) * float64(a[i*r+d])
				}
				for i := 0; i < rows; i++ {
					a[i*r+c] = float32(float64(a[i*r+c]) - dot*float64(a[i*r+d]))
				}
			}
		}
		var ss float64
		for i := 0; i < rows; i++ {
			v := float64(a[i*r+c])
			ss += v * v
		}
		norm := math.Sqrt(ss) + eps
		if norm == 0 {
			continue // all zero
		}
		inv := 1 / norm
		for i := 0; i < rows; i++ {
			a[i*r+c] = float32(float64(a[i*r+c]) * inv)
		}
	}
}

// outer sets m (rows×cols) to p·qᵀ, p rows×r and q cols×r. It is plain Go
// with each product rounded (no fused multiply-add), so that ranks on
// CPUs with different GEMM kernels still apply the same bits.
func outer(m, p, q []float32, rows, cols, r int) {
	for i := 0; i < rows; i++ {
		pi := p[i*r : i*r+r]
		row := m[i*cols : i*cols+cols]
		switch r {
		case 1:
			a := pi[0]
			for j := range row {
				row[j] = float32(a * q[j])
			}
		default:
			for j := range row {
				qj := q[j*r : j*r+r]
				var s float32
				for l, v := range pi {
					s += float32(v * qj[l])
				}
				row[j] = s
			}
		}
	}
}

// State names in StateDict.
const (
	powerSGDVersion = "1"
	qPrefix         = "q."
	errorPrefix     = "error."
)

// StateDict returns the hook's state for a checkpoint: the step count,
// the warm start's Q of each parameter ("q.<param>") and the error of
// each rank ("error.<rank>.<param>"): every rank's if GatherState ran
// since the last step, else this rank's alone.
func (p *PowerSGD) StateDict() optim.State {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := optim.State{Tensors: map[string]*tensor.Tensor{}, Meta: map[string]string{
		"powersgd": powerSGDVersion,
		"iter":     strconv.Itoa(p.iter),
		"rank":     strconv.Itoa(p.cfg.Rank),
	}}
	for param, q := range p.q {
		st.Tensors[qPrefix+strconv.Itoa(param)] = tensor.New(slices.Clone(q), len(q))
	}
	errs := p.gathered
	if p.gatheredAt != p.iter {
		rank := max(p.rank, 0)
		errs = make([]map[int][]float32, rank+1)
		errs[rank] = p.errs
	}
	ranks := 0
	for rank, m := range errs {
		if m == nil {
			continue
		}
		ranks++
		for param, e := range m {
			st.Tensors[errorPrefix+strconv.Itoa(rank)+"."+strconv.Itoa(param)] = tensor.New(slices.Clone(e), len(e))
		}
	}
	st.Meta["error_ranks"] = strconv.Itoa(len(errs))
	return st
}

// LoadStateDict replaces the hook's state with st, from StateDict. The
// Qs are checked against the parameters at the first compressed step (a
// Q of another rank or shape is drawn afresh); the errors too, where each
// rank takes its own if st holds as many ranks' errors as the group has,
// else the ranks' mean error (which, with the same Qs, gives the same
// next update in exact arithmetic, as the update depends only on the
// ranks' summed gradients). On error the state is unchanged.
func (p *PowerSGD) LoadStateDict(st optim.State) error {
	if v := st.Meta["powersgd"]; v != powerSGDVersion {
		return fmt.Errorf("ddp: not a PowerSGD state (version %q, want %q)", v, powerSGDVersion)
	}
	iter, err := strconv.Atoi(st.Meta["iter"])
	if err != nil || iter < 0 {
		return fmt.Errorf("ddp: PowerSGD state: iter %q is not a count", st.Meta["iter"])
	}
	nranks, err := strconv.Atoi(st.Meta["error_ranks"])
	if err != nil || nranks < 0 || nranks > 1<<16 {
		return fmt.Errorf("ddp: PowerSGD state: error_ranks %q is not a count", st.Meta["error_ranks"])
	}
	q := map[int][]float32{}
	errs := make([]map[int][]float32, nranks)
	for name, t := range st.Tensors {
		if s, ok := strings.CutPrefix(name, qPrefix); ok {
			param, err := strconv.Atoi(s)
			if err != nil || param < 0 {
				return fmt.Errorf("ddp: PowerSGD state: bad tensor name %q", name)
			}
			q[param] = slices.Clone(t.Data())
			continue
		}
		s, ok := strings.CutPrefix(name, errorPrefix)
		rs, ps, ok2 := strings.Cut(s, ".")
		rank, err1 := strconv.Atoi(rs)
		param, err2 := strconv.Atoi(ps)
		if !ok || !ok2 || err1 != nil || err2 != nil || rank < 0 || rank >= nranks || param < 0 {
			return fmt.Errorf("ddp: PowerSGD state: bad tensor name %q", name)
		}
		if errs[rank] == nil {
			errs[rank] = map[int][]float32{}
		}
		errs[rank][param] = slices.Clone(t.Data())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.iter, p.q, p.errs, p.pending = iter, q, map[int][]float32{}, errs
	p.gathered, p.gatheredAt = nil, -1
	if nranks == 0 {
		p.pending = nil
	}
	if len(q) > 0 && st.Meta["rank"] != strconv.Itoa(p.cfg.Rank) {
		slog.Info("ddp: PowerSGD rank differs from the checkpoint's: drawing new Q matrices", "saved", st.Meta["rank"], "rank", p.cfg.Rank)
		p.q = map[int][]float32{}
	}
	return nil
}

// adoptPending takes this rank's error from a loaded state: its own if
// the state has one per rank of the group, else the mean of the saved
// ranks' errors.
func (p *PowerSGD) adoptPending(g Group) error {
	saved := p.pending
	p.pending = nil
	if len(saved) == g.Size() && saved[g.Rank()] != nil {
		p.errs = saved[g.Rank()]
		return nil
	}
	var have []map[int][]float32
	for _, m := range saved {
		if len(m) > 0 {
			have = append(have, m)
		}
	}
	p.errs = map[int][]float32{}
	if len(have) == 0 {
		return nil // saved before compression began
	}
	slog.Warn("ddp: PowerSGD: the checkpoint holds the error of another number of ranks; every rank starts from their mean",
		"saved_ranks", len(have), "world", g.Size())
	for param, e := range have[0] {
		sum := make([]float64, len(e))
		for _, m := range have {
			if len(m[param]) != len(e) {
				return fmt.Errorf("ddp: PowerSGD state: the ranks' errors of parameter %d differ in size", param)
			}
			for i, v := range m[param] {
				sum[i] += float64(v)
			}
		}
		mean := make([]float32, len(e))
		for i, s := range sum {
			mean[i] = float32(s / float64(len(have)))
		}
		p.errs[param] = mean
	}
	return nil
}

// GatherState collects every rank's error feedback onto every rank, for
// StateDict to save them all: a collective, so every rank of g calls it,
// after the same step (a checkpoint). Between checkpoints the errors stay
// on their ranks.
func (p *PowerSGD) GatherState(ctx context.Context, g Group) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	params := slices.Sorted(maps.Keys(p.errs))
	n := 0
	for _, param := range params {
		n += len(p.errs[param])
	}
	// Every rank holds errors for the same parameters once compression
	// has begun; check the size before trusting the layout.
	sizes := make([]int64, g.Size())
	if err := g.AllGather(ctx, sizes, []int64{int64(n)}); err != nil {
		return fmt.Errorf("ddp: PowerSGD: gathering the error sizes: %w", err)
	}
	for r, s := range sizes {
		if s != int64(n) {
			return fmt.Errorf("ddp: PowerSGD: rank %d holds %d error values, rank %d %d", r, s, g.Rank(), n)
		}
	}
	// Gathered as int32 words, bit for bit: a type every Group carries.
	mine := make([]int32, 0, n)
	for _, param := range params {
		for _, v := range p.errs[param] {
			mine = append(mine, int32(math.Float32bits(v)))
		}
	}
	words := make([]int32, n*g.Size())
	if n > 0 {
		if err := g.AllGather(ctx, words, mine); err != nil {
			return fmt.Errorf("ddp: PowerSGD: gathering the errors: %w", err)
		}
	}
	all := make([]float32, len(words))
	for i, w := range words {
		all[i] = math.Float32frombits(uint32(w))
	}
	p.gathered = make([]map[int][]float32, g.Size())
	for r := range p.gathered {
		m := map[int][]float32{}
		off := r * n
		for _, param := range params {
			k := len(p.errs[param])
			m[param] = all[off : off+k : off+k]
			off += k
		}
		p.gathered[r] = m
	}
	p.gatheredAt = p.iter
	p.rank = g.Rank()
	return nil
}
