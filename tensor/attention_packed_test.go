package tensor

import (
	"fmt"
	"math"
	"testing"

	"github.com/gotrain/gotrain/internal/kernels"
)

// attnHeadsResult is what forwardHead and backwardHead computed for
// every head of one geometry.
type attnHeadsResult struct {
	out, lse, dq, dk, dv []float32
}

// runAttnHeads runs the forward and backward pass of every head of a on
// q, k and v (the one qkv tensor in the packed layout) with the incoming
// gradient g, the block products with Kᵀ and Vᵀ on packed panels or
// through a.gemm as packKV says. With onlyDV (separate q, k and v), only
// v's gradient is computed.
func runAttnHeads(a attnGeom, packKV, onlyDV bool, q, k, v, g []float32, outLen int) attnHeadsResult {
	a.packKV = packKV
	r := attnHeadsResult{out: make([]float32, outLen), lse: make([]float32, a.heads*a.tq)}
	switch {
	case a.packed:
		r.dq = make([]float32, len(q))
		r.dk, r.dv = r.dq, r.dq
	case onlyDV:
		r.dv = make([]float32, len(v))
	default:
		r.dq, r.dk, r.dv = make([]float32, len(q)), make([]float32, len(k)), make([]float32, len(v))
	}
	s, st, d := make([]float32, 2*attnBr*attnBc), make([]float32, 2*attnBr), make([]float32, a.tq)
	kp, vp := new(kernels.PackedB), new(kernels.PackedB)
	for h := range a.heads {
		a.forwardHead(h, q, k, v, r.out, r.lse, s, st, kp, nil)
	}
	for h := range a.heads {
		a.backwardHead(h, q, k, v, r.out, g, r.lse, r.dq, r.dk, r.dv, s, d, false, kp, vp, nil)
	}
	return r
}

// sameBits reports the first element where got and want differ in their
// bits, or -1.
func sameBits(got, want []float32) int {
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			return i
		}
	}
	return -1
}

// checkPackedKVSameBits runs a's heads with and without the packed keys
// and values and requires the same bits in every output and gradient.
func checkPackedKVSameBits(t *testing.T, name string, a attnGeom, onlyDV bool, q, k, v, g []float32, outLen int) {
	t.Helper()
	want := runAttnHeads(a, false, onlyDV, q, k, v, g, outLen)
	got := runAttnHeads(a, true, onlyDV, q, k, v, g, outLen)
	for _, c := range []struct {
		what      string
		got, want []float32
	}{{"out", got.out, want.out}, {"lse", got.lse, want.lse}, {"dq", got.dq, want.dq}, {"dk", got.dk, want.dk}, {"dv", got.dv, want.dv}} {
		if i := sameBits(c.got, c.want); i >= 0 {
			t.Fatalf("%s: %s[%d] = %v with packed keys and values, %v without", name, c.what, i, c.got[i], c.want[i])
		}
	}
}

// TestAttentionPackedKVSameBits checks that the block products with Kᵀ
// and Vᵀ give the same bits from a head's packed panels as from
// kernels.SgemmSerial packing them at every call: the GPT's fused qkv
// layout (T = 128, heads of 32, causal and not, with dropout's extra
// block unused) and separate [B, H, T, Dh] tensors whose query and key
// lengths and head sizes cut the blocks and register tiles unevenly,
// also with only v's gradient wanted.
func TestAttentionPackedKVSameBits(t *testing.T) {
	rng := NewRNG(83)
	for _, c := range []struct {
		b, heads, t, dh int
		causal          bool
	}{{2, 4, 128, 32, false}, {2, 4, 128, 32, true}, {1, 2, 161, 64, true}, {1, 3, 45, 96, true}} {
		ch := c.heads * c.dh
		qkv := randT(rng, -2, 2, c.b, c.t, 3*ch).data
		g := randT(rng, -1, 1, c.b, c.t, ch).data
		a := attnGeom{
			heads: c.b * c.heads, nh: c.heads, tq: c.t, tk: c.t, dh: c.dh, causal: c.causal,
			packed: true, ldq: 3 * ch, ldkv: 3 * ch, ldo: ch, gemm: kernels.SgemmSerial,
		}
		a.setBlocks()
		a.scale = float32(1 / math.Sqrt(float64(c.dh)))
		name := fmt.Sprintf("qkv B=%d H=%d T=%d Dh=%d causal=%v", c.b, c.heads, c.t, c.dh, c.causal)
		checkPackedKVSameBits(t, name, a, false, qkv, qkv, qkv, g, c.b*c.t*ch)
	}
	for _, c := range []struct {
		tq, tk, dh int
		causal     bool
	}{{45, 300, 8, true}, {300, 45, 32, true}, {33, 33, 32, true}, {1, 140, 16, true}, {70, 200, 32, false}, {5, 7, 3, false}} {
		q, k, v := randT(rng, -2, 2, 1, 2, c.tq, c.dh), randT(rng, -2, 2, 1, 2, c.tk, c.dh), randT(rng, -1, 1, 1, 2, c.tk, c.dh)
		g := randT(rng, -1, 1, 1, 2, c.tq, c.dh)
		a := newAttnGeom("test", q, k, v, c.causal)
		for _, onlyDV := range []bool{false, true} {
			name := fmt.Sprintf("Tq=%d Tk=%d Dh=%d causal=%v onlyDV=%v", c.tq, c.tk, c.dh, c.causal, onlyDV)
			checkPackedKVSameBits(t, name, a, onlyDV, q.data, k.data, v.data, g.data, len(q.data))
		}
	}
}

// TestAttentionPackedKVObserved checks that a GEMM observer still sees
// every product with Kᵀ or Vᵀ, with its shape, when they run on packed
// panels, as the step's GEMM accounting needs.
func TestAttentionPackedKVObserved(t *testing.T) {
	var calls []kernels.GemmCall
	prev := kernels.SetGemmObserver(func(c kernels.GemmCall) { calls = append(calls, c) })
	defer kernels.SetGemmObserver(prev)
	defer kernels.SetNumThreads(kernels.SetNumThreads(1))
	qkv := randT(NewRNG(5), -1, 1, 1, 64, 3*64)
	qkv.SetRequiresGrad(true)
	y := SelfAttentionQKV(qkv, 2, true)
	if err := y.BackwardWith(Full(1, y.shape...)); err != nil {
		t.Fatal(err)
	}
	kernels.SetGemmObserver(prev)
	// Per head, forward: two Q·Kᵀ (of 32 and 64 keys) and two P·V;
	// backward per block pair: Pᵀ·dO, dO·Vᵀ, dS·K and dSᵀ·Q, the
	// probabilities kept from forward (T = 64 keys fit in one block).
	nt := 0
	for _, c := range calls {
		if !c.Serial {
			t.Fatalf("attention's block product %+v is not serial", c)
		}
		if !c.TransA && c.TransB && c.K == 32 && c.M == 32 {
			nt++
		}
	}
	if want := 2 * (2 + 2); nt != want {
		t.Fatalf("observer saw %d products with Kᵀ or Vᵀ, want %d", nt, want)
	}
}
