package tensor

import (
	"fmt"
	"math"
	"testing"

	"github.com/gotrain/gotrain/internal/kernels"
)

// TestAttentionOneKeyBlockMatchesReference checks attention whose keys
// fit in one block against the unfused reference: exactly one block of
// keys (T = 128, the default GPT's), more queries than one block of rows
// with one of keys, a single key, and fewer queries than keys, with and
// without the causal mask.
func TestAttentionOneKeyBlockMatchesReference(t *testing.T) {
	rng := NewRNG(51)
	for _, c := range []struct{ tq, tk int }{{128, 128}, {200, 128}, {77, 1}, {9, 120}} {
		for _, causal := range []bool{true, false} {
			checkAttentionMatchesRef(t, rng, fmt.Sprintf("Tq=%d Tk=%d causal=%v", c.tq, c.tk, causal), 2, 3, 16, c.tq, c.tk, causal)
		}
	}
}

// TestAttentionGPTShapeBits checks the packed causal attention at the
// default GPT's T = 128 bit for bit: the output is the same recorded for
// backward and without grad, and one and two threads give the same output
// and gradient.
func TestAttentionGPTShapeBits(t *testing.T) {
	rng := NewRNG(52)
	qkv := randT(rng, -2, 2, 3, 128, 3*4*32)
	w := randT(rng, -1, 1, 3, 128, 4*32)
	run := func(threads int) (out, grad []float32) {
		defer kernels.SetNumThreads(kernels.SetNumThreads(threads))
		return packedAttention(t, qkv, w, 4)
	}
	o1, g1 := run(1)
	o2, g2 := run(2)
	var o3 []float32
	NoGrad(func() { o3 = append([]float32(nil), SelfAttentionQKV(qkv, 4, true).data...) })
	for i := range o1 {
		if math.Float32bits(o1[i]) != math.Float32bits(o2[i]) || math.Float32bits(o1[i]) != math.Float32bits(o3[i]) {
			t.Fatalf("out[%d]: %v with 1 thread, %v with 2, %v without grad", i, o1[i], o2[i], o3[i])
		}
	}
	for i := range g1 {
		if math.Float32bits(g1[i]) != math.Float32bits(g2[i]) {
			t.Fatalf("dqkv[%d]: %v with 1 thread, %v with 2", i, g1[i], g2[i])
		}
	}
}
