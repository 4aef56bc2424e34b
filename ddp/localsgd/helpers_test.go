package localsgd

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// runRanks runs f on n in-process ranks joined by a real process group
// (file store, TCP or shared-memory transport) and fails the test with
// every rank's error.
func runRanks(t *testing.T, n int, f func(ctx context.Context, g *distributed.Group) error) {
	t.Helper()
	store := "file://" + filepath.Join(t.TempDir(), "store")
	errs := make([]error, n)
	var wg sync.WaitGroup
	for rank := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			g, err := distributed.Init(ctx, distributed.Config{InitMethod: store, Rank: rank, WorldSize: n, Timeout: 2 * time.Minute})
			if err != nil {
				errs[rank] = err
				return
			}
			defer g.Destroy()
			errs[rank] = f(ctx, g)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// The linear model of the hand references: y = W·x + b with W [lOut,lIn],
// trained on the mean squared error of batches of lB samples.
const lIn, lOut, lB = 3, 2, 4

// linearInit is the model's starting point, W then b (the order of its
// parameters), the same on every rank.
func linearInit() []float64 {
	return []float64{0.5, -0.3, 0.8, 0.1, 0.7, -0.6, 0.05, -0.2}
}

func newLinear() *nn.LinearLayer {
	l := nn.Linear(lIn, lOut)
	init := linearInit()
	for i := range lIn * lOut {
		l.Weight.Data()[i] = float32(init[i])
	}
	for i := range lOut {
		l.Bias.Data()[i] = float32(init[lIn*lOut+i])
	}
	return l
}

// linearBatch is rank's batch at step (counting from 1): inputs x
// [lB,lIn] and targets y [lB,lOut] from a fixed linear map plus a
// rank-dependent shift, so that the ranks' replicas drift apart.
func linearBatch(step, rank int) (x, y []float32) {
	rng := tensor.NewRNG(uint64(1000*step + rank))
	x, y = make([]float32, lB*lIn), make([]float32, lB*lOut)
	for i := range x {
		x[i] = rng.Uniform(-1, 1)
	}
	for s := range lB {
		for o := range lOut {
			v := float32(o+1)*x[s*lIn] - x[s*lIn+1] + 0.5*x[s*lIn+2]*float32(o) + 0.3*float32(rank)
			y[s*lOut+o] = v + 0.1*rng.Uniform(-1, 1)
		}
	}
	return x, y
}

// linearGrad is the float64 gradient of the mean squared error of the
// linear model theta (W then b) on rank's batch at step.
func linearGrad(theta []float64, step, rank int) []float64 {
	x, y := linearBatch(step, rank)
	g := make([]float64, len(theta))
	scale := 2.0 / float64(lB*lOut)
	for s := range lB {
		for o := range lOut {
			pred := theta[lIn*lOut+o]
			for i := range lIn {
				pred += theta[o*lIn+i] * float64(x[s*lIn+i])
			}
			e := scale * (pred - float64(y[s*lOut+o]))
			for i := range lIn {
				g[o*lIn+i] += e * float64(x[s*lIn+i])
			}
			g[lIn*lOut+o] += e
		}
	}
	return g
}

// trainStep takes one optimizer step of m on rank's batch at step.
func trainStep(m interface {
	Forward(*tensor.Tensor) *tensor.Tensor
}, opt optim.Optimizer, step, rank int) float32 {
	x, y := linearBatch(step, rank)
	opt.ZeroGrad()
	loss := tensor.MSELoss(m.Forward(tensor.New(x, lB, lIn)), tensor.New(y, lB, lOut), "mean")
	if err := loss.Backward(); err != nil {
		panic(err)
	}
	opt.Step()
	return loss.Item()
}

// ref is the float64 reference of the training the tests compare with,
// written from the algorithms' definitions, independently of the
// package: inner SGD on every rank, then the syncs.
type ref struct {
	mode              string // "ddp", "localsgd" or "diloco"
	world, h          int
	frags             [][2]int // element ranges of the flat parameters
	delay             int
	alpha             float64
	innerLR           float64
	outerLR, outerMom float64 // outerMom > 0: Nesterov
	contributors      int
	theta             [][]float64 // per rank
	global, buf       []float64
	started           []bool // buf holds a momentum
	pending           [][]float64
	applyAt           []int
}

func newRef(mode string, world, h int, frags [][2]int) *ref {
	r := &ref{mode: mode, world: world, h: h, frags: frags, innerLR: 0.1, outerLR: 0.7, outerMom: 0.9, contributors: world}
	for range world {
		r.theta = append(r.theta, linearInit())
	}
	r.global = linearInit()
	r.buf = make([]float64, len(r.global))
	r.started = make([]bool, len(frags))
	r.pending = make([][]float64, len(frags))
	r.applyAt = make([]int, len(frags))
	return r
}

func (r *ref) step(s int) {
	grads := make([][]float64, r.world)
	for k := range r.world {
		grads[k] = linearGrad(r.theta[k], s, k)
	}
	if r.mode == "ddp" {
		for j := range r.theta[0] {
			var g float64
			for k := range r.world {
				g += grads[k][j]
			}
			g /= float64(r.world)
			for k := range r.world {
				r.theta[k][j] -= r.innerLR * g
			}
		}
		return
	}
	for k := range r.world {
		for j := range r.theta[k] {
			r.theta[k][j] -= r.innerLR * grads[k][j]
		}
	}
	for f := range r.frags {
		if r.pending[f] != nil && r.applyAt[f] <= s {
			r.apply(f)
		}
	}
	F := len(r.frags)
	for f, fr := range r.frags {
		if s%r.h != ((f+1)*r.h/F)%r.h {
			continue
		}
		avg := make([]float64, fr[1]-fr[0])
		for k := range r.world {
			for j := range avg {
				if r.mode == "diloco" {
					avg[j] += r.global[fr[0]+j] - r.theta[k][fr[0]+j]
				} else {
					avg[j] += r.theta[k][fr[0]+j]
				}
			}
		}
		for j := range avg {
			avg[j] /= float64(r.contributors)
		}
		r.pending[f], r.applyAt[f] = avg, s+r.delay
		if r.delay == 0 {
			r.apply(f)
		}
	}
}

func (r *ref) apply(f int) {
	fr, avg := r.frags[f], r.pending[f]
	r.pending[f] = nil
	src := avg
	if r.mode == "diloco" {
		for j, d := range avg {
			i := fr[0] + j
			g := d
			if r.outerMom > 0 {
				if r.started[f] {
					r.buf[i] = r.outerMom*r.buf[i] + d
				} else {
					r.buf[i] = d
				}
				g = d + r.outerMom*r.buf[i]
			}
			r.global[i] -= r.outerLR * g
		}
		r.started[f] = true
		src = r.global[fr[0]:fr[1]]
	}
	for k := range r.world {
		for j := range src {
			r.theta[k][fr[0]+j] = r.alpha*r.theta[k][fr[0]+j] + (1-r.alpha)*src[j]
		}
	}
}

// flatParams returns m's parameters as one float32 slice.
func flatParams(m nn.Module) []float32 {
	var out []float32
	for _, p := range nn.Parameters(m) {
		out = append(out, p.Data()...)
	}
	return out
}

// closeTo reports the first element of got farther than tol·(1+|want|)
// from want, or "".
func closeTo(got []float32, want []float64, tol float64) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d values, want %d", len(got), len(want))
	}
	for i := range got {
		if d := math.Abs(float64(got[i]) - want[i]); !(d <= tol*(1+math.Abs(want[i]))) {
			return fmt.Sprintf("[%d] = %v, want %v (|diff| %.3g)", i, got[i], want[i], d)
		}
	}
	return ""
}
