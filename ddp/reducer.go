package ddp

import "fmt"

// Default bucket caps, as in PyTorch DDP: the first bucket is small so its
// allreduce starts early in backward; the rest are large to amortise latency.
const (
	DefaultBucketCapBytes      = 25 << 20
	DefaultFirstBucketCapBytes = 1 << 20
)

// bucketPlan is one bucket: which parameters (by index) it holds and where
// each one's gradient lives in the bucket's flat buffer.
type bucketPlan struct {
	params  []int
	offsets []int
	size    int // elements
}

// assignBuckets groups parameters, taken in the given order, into buckets of
// at least capBytes (firstCapBytes for the first), as PyTorch's
// compute_bucket_assignment_by_size does: a bucket closes once it reaches
// its cap.
func assignBuckets(order []int, numel []int, firstCapBytes, capBytes int) []bucketPlan {
	var plans []bucketPlan
	cur := bucketPlan{}
	limit := firstCapBytes
	for _, p := range order {
		cur.params = append(cur.params, p)
		cur.offsets = append(cur.offsets, cur.size)
		cur.size += numel[p]
		if cur.size*4 >= limit {
			plans = append(plans, cur)
			cur = bucketPlan{}
			limit = capBytes
		}
	}
	if len(cur.params) > 0 {
		plans = append(plans, cur)
	}
	return plans
}

// reducer is the Reducer's state machine, without I/O: it is told that a
// parameter's gradient is ready and answers which buckets may start their
// allreduce now. Buckets start strictly in index order, so every rank issues
// the same collectives in the same order whatever order its gradients
// become ready in.
type reducer struct {
	plans    []bucketPlan
	bucketOf []int // parameter -> bucket
	slotOf   []int // parameter -> position within its bucket

	// Per backward pass.
	ready    []bool
	pending  []int // per bucket: parameters not yet ready
	next     int   // next bucket to launch
	observed []int // ready order of this pass, for the bucket rebuild
}

func newReducer(plans []bucketPlan, numParams int) *reducer {
	r := &reducer{plans: plans, bucketOf: make([]int, numParams), slotOf: make([]int, numParams)}
	for i := range r.bucketOf {
		r.bucketOf[i] = -1
	}
	for b, pl := range plans {
		for s, p := range pl.params {
			r.bucketOf[p] = b
			r.slotOf[p] = s
		}
	}
	r.reset()
	return r
}

// reset starts a new backward pass.
func (r *reducer) reset() {
	r.ready = make([]bool, len(r.bucketOf))
	r.pending = make([]int, len(r.plans))
	for b, pl := range r.plans {
		r.pending[b] = len(pl.params)
	}
	r.next = 0
	r.observed = r.observed[:0]
}

// markReady records that parameter p's gradient is final and returns the
// buckets that may now be launched, in order.
func (r *reducer) markReady(p int) ([]int, error) {
	if p < 0 || p >= len(r.ready) || r.bucketOf[p] < 0 {
		return nil, fmt.Errorf("ddp: parameter %d is not managed by the reducer", p)
	}
	if r.ready[p] {
		return nil, fmt.Errorf("ddp: parameter %d marked ready twice in one backward pass (is it used by two DDP models, or reentrant backward?)", p)
	}
	r.ready[p] = true
	r.observed = append(r.observed, p)
	r.pending[r.bucketOf[p]]--
	var launch []int
	for r.next < len(r.plans) && r.pending[r.next] == 0 {
		launch = append(launch, r.next)
		r.next++
	}
	return launch, nil
}

// allLaunched reports whether every bucket has been launched this pass.
func (r *reducer) allLaunched() bool { return r.next == len(r.plans) }

// notReady lists the parameters whose gradients never became ready.
func (r *reducer) notReady() []int {
	var out []int
	for p, ok := range r.ready {
		if !ok && r.bucketOf[p] >= 0 {
			out = append(out, p)
		}
	}
	return out
}
