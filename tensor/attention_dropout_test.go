package tensor

import (
	"fmt"
	"math"
	"testing"
)

// attnDropoutRef is attention with dropout in float64, forward and
// backward for the output gradient w: the probabilities materialised, the
// mask read from keep(head, query, key).
func attnDropoutRef(q, k, v, w *Tensor, causal bool, scale float64, keep func(h, i, j int) float64) (out, dq, dk, dv []float64) {
	s := q.shape
	heads, tq, tk, dh := s[0]*s[1], s[2], k.shape[2], s[3]
	out, dq, dk, dv = make([]float64, len(q.data)), make([]float64, len(q.data)), make([]float64, len(k.data)), make([]float64, len(v.data))
	for h := range heads {
		at := func(x []float32, r, c int) float64 { return float64(x[(h*tq+r)*dh+c]) }
		p := make([][]float64, tq)
		for i := range tq {
			p[i] = make([]float64, tk)
			mx, sum := math.Inf(-1), 0.0
			for j := range tk {
				p[i][j] = math.Inf(-1)
				if !causal || j <= i {
					dot := 0.0
					for c := range dh {
						dot += at(q.data, i, c) * at(k.data, j, c)
					}
					p[i][j] = dot * scale
				}
				mx = math.Max(mx, p[i][j])
			}
			for j := range tk {
				p[i][j] = math.Exp(p[i][j] - mx)
				sum += p[i][j]
			}
			for j := range tk {
				p[i][j] /= sum
			}
		}
		for i := range tq {
			// out = Pd·V; dPd = w·Vᵀ; dP = dPd∘M; dS = P∘(dP − Σ dP∘P)
			dp := make([]float64, tk)
			rowDot := 0.0
			for j := range tk {
				m := keep(h, i, j)
				for c := range dh {
					out[(h*tq+i)*dh+c] += p[i][j] * m * at(v.data, j, c)
					dv[(h*tk+j)*dh+c] += p[i][j] * m * at(w.data, i, c)
					dp[j] += at(w.data, i, c) * at(v.data, j, c)
				}
				dp[j] *= m
				rowDot += dp[j] * p[i][j]
			}
			for j := range tk {
				ds := p[i][j] * (dp[j] - rowDot) * scale
				for c := range dh {
					dq[(h*tq+i)*dh+c] += ds * at(k.data, j, c)
					dk[(h*tk+j)*dh+c] += ds * at(q.data, i, c)
				}
			}
		}
	}
	return out, dq, dk, dv
}

func dropCloseTo(t *testing.T, what string, got []float32, want []float64) {
	t.Helper()
	for i := range want {
		if d := math.Abs(float64(got[i]) - want[i]); d > 2e-4*(1+math.Abs(want[i])) {
			t.Fatalf("%s[%d] = %v, want %v", what, i, got[i], want[i])
		}
	}
}

// The fused attention with dropout equals dropout applied to the
// materialised probabilities, forward and backward, within one tile and
// across tiles, with and without the causal mask.
func TestAttentionDropoutMatchesReference(t *testing.T) {
	rng := NewRNG(5)
	const p = 0.3
	for _, c := range []struct{ b, h, t, dh int }{{2, 2, 5, 4}, {1, 2, 70, 5}, {1, 1, 130, 8}} {
		for _, causal := range []bool{false, true} {
			name := fmt.Sprintf("B=%d H=%d T=%d Dh=%d causal=%v", c.b, c.h, c.t, c.dh, causal)
			q, k, v := randT(rng, -2, 2, c.b, c.h, c.t, c.dh), randT(rng, -2, 2, c.b, c.h, c.t, c.dh), randT(rng, -2, 2, c.b, c.h, c.t, c.dh)
			w := randT(rng, -1, 1, c.b, c.h, c.t, c.dh)
			for _, x := range []*Tensor{q, k, v} {
				x.SetRequiresGrad(true)
			}
			out := ScaledDotProductAttentionDropout(q, k, v, causal, p, NewRNG(77))
			if err := out.BackwardWith(w); err != nil {
				t.Fatal(err)
			}
			drop := newAttnDropout("test", p, NewRNG(77))
			geom := attnGeom{tq: c.t, tk: c.t}
			kept := 0
			keep := func(h, i, j int) float64 {
				if drop.keeps(geom.dropIndex(h, i, j)) {
					kept++
					return 1 / (1 - p)
				}
				return 0
			}
			ro, rq, rk, rv := attnDropoutRef(q, k, v, w, causal, 1/math.Sqrt(float64(c.dh)), keep)
			if n := c.b * c.h * c.t * c.t; kept == n || kept == 0 {
				t.Fatalf("%s: the mask keeps %d of %d", name, kept, n)
			}
			dropCloseTo(t, name+" out", out.data, ro)
			dropCloseTo(t, name+" dq", q.grad.data, rq)
			dropCloseTo(t, name+" dk", k.grad.data, rk)
			dropCloseTo(t, name+" dv", v.grad.data, rv)
		}
	}
}

// The packed form drops the same probabilities as the [B, H, T, Dh] one.
func TestSelfAttentionQKVDropoutMatchesPermuted(t *testing.T) {
	rng := NewRNG(8)
	b, tt, heads, dh := 2, 67, 3, 4
	qkv := randT(rng, -2, 2, b, tt, 3*heads*dh)
	w := randT(rng, -1, 1, b, tt, heads*dh)
	run := func(f func(*Tensor) *Tensor) (out, grad []float32) {
		qkv.SetRequiresGrad(true)
		qkv.SetGrad(nil)
		o := f(MulScalar(qkv, 1))
		if err := o.BackwardWith(w); err != nil {
			t.Fatal(err)
		}
		return o.data, qkv.grad.data
	}
	o1, g1 := run(func(x *Tensor) *Tensor { return SelfAttentionQKVDropout(x, heads, true, 0.2, NewRNG(3)) })
	o2, g2 := run(func(x *Tensor) *Tensor {
		parts := Unbind(Permute(x.Reshape(b, tt, 3, heads, dh), 2, 0, 3, 1, 4), 0)
		y := ScaledDotProductAttentionDropout(parts[0], parts[1], parts[2], true, 0.2, NewRNG(3))
		return Permute(y, 0, 2, 1, 3).Reshape(b, tt, heads*dh)
	})
	for i := range o2 {
		if d := math.Abs(float64(o1[i] - o2[i])); d > 1e-5*(1+math.Abs(float64(o2[i]))) {
			t.Fatalf("out[%d] = %v, permuted %v", i, o1[i], o2[i])
		}
	}
	for i := range g2 {
		if d := math.Abs(float64(g1[i] - g2[i])); d > 1e-5*(1+math.Abs(float64(g2[i]))) {
			t.Fatalf("dqkv[%d] = %v, permuted %v", i, g1[i], g2[i])
		}
	}
	// The same generator state gives the same masks, the next draw others.
	r := NewRNG(3)
	a, bb := SelfAttentionQKVDropout(qkv, heads, true, 0.2, r), SelfAttentionQKVDropout(qkv, heads, true, 0.2, r)
	same := true
	for i := range a.data {
		same = same && a.data[i] == bb.data[i] && a.data[i] == o1[i]
	}
	if same {
		t.Fatal("two calls on one generator dropped the same probabilities")
	}
	// p = 1 drops everything.
	for _, x := range SelfAttentionQKVDropout(qkv, heads, true, 1, r).data {
		if x != 0 {
			t.Fatalf("p = 1: output %v, want 0", x)
		}
	}
}

// Each probability is kept with probability 1−p, independently of its
// neighbours.
func TestAttentionDropoutRate(t *testing.T) {
	for _, p := range []float32{0.1, 0.5, 0.9} {
		d := newAttnDropout("test", p, NewRNG(11))
		const n = 1 << 20
		kept, pairs := 0, 0
		prev := false
		for i := range uint64(n) {
			k := d.keeps(i)
			if k {
				kept++
			}
			if k && prev {
				pairs++
			}
			prev = k
		}
		keep := 1 - float64(p)
		if got := float64(kept) / n; math.Abs(got-keep) > 0.003 {
			t.Errorf("p=%v: kept %.4f, want %.4f", p, got, keep)
		}
		if got := float64(pairs) / n; math.Abs(got-keep*keep) > 0.003 {
			t.Errorf("p=%v: neighbours both kept %.4f, want %.4f", p, got, keep*keep)
		}
	}
	defer func() {
		if r := recover(); r == nil {
			t.Error("p = 1.5 did not panic")
		}
	}()
	SelfAttentionQKVDropout(Zeros(1, 2, 6), 1, true, 1.5, NewRNG(1))
}
