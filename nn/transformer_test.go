package nn

import (
	"strings"
	"testing"

	"github.com/gotrain/gotrain/tensor"
)

func TestTransformerBadInput(t *testing.T) {
	attn := CausalSelfAttention(8, 2, 0)
	msg := mustPanic(t, func() { attn.Forward(tensor.Zeros(2, 3, 6)) })
	if !strings.Contains(msg, "CausalSelfAttention(n_embd=8, n_head=2)") || !strings.Contains(msg, "[2 3 6]") || !strings.Contains(msg, "[B, T, 8]") {
		t.Errorf("attention shape mismatch: %q", msg)
	}
	msg = mustPanic(t, func() { LayerNorm(4).Forward(tensor.Zeros(2, 5)) })
	if !strings.Contains(msg, "LayerNorm((4,)") || !strings.Contains(msg, "[2 5]") {
		t.Errorf("LayerNorm mismatch: %q", msg)
	}
	msg = mustPanic(t, func() { Embedding(5, 3).Lookup([]int{1, 7}, 2) })
	if !strings.Contains(msg, "token id 7") || !strings.Contains(msg, "vocabulary size 5") {
		t.Errorf("embedding id: %q", msg)
	}
	msg = mustPanic(t, func() { Embedding(5, 3).Forward(tensor.New([]float32{1.5}, 1)) })
	if !strings.Contains(msg, "not a whole number") {
		t.Errorf("fractional id: %q", msg)
	}
	msg = mustPanic(t, func() { CausalSelfAttention(10, 3, 0) })
	if !strings.Contains(msg, "multiple of n_head") {
		t.Errorf("heads: %q", msg)
	}
	msg = mustPanic(t, func() { Linear(3, 4).TieWeight(tensor.Zeros(3, 4)) })
	if !strings.Contains(msg, "[3 4]") || !strings.Contains(msg, "[4 3]") {
		t.Errorf("tie shape: %q", msg)
	}
}

// TestTiedWeightAccumulatesBothUses ties a Linear's weight to an
// embedding's and checks the gradient is the sum of both uses and the
// hook fires once, after the last.
func TestTiedWeightAccumulatesBothUses(t *testing.T) {
	emb := Embedding(4, 3)
	head := Linear(3, 4, NoBias())
	head.TieWeight(emb.Weight)
	n := ModuleDict()
	n.Set("emb", emb)
	n.Set("head", head)
	if got := len(NamedParameters(n)); got != 1 {
		t.Fatalf("%d parameters, want 1 (tied)", got)
	}
	if NumParameters(n) != 12 || len(StateDict(n)) != 2 {
		t.Fatalf("NumParameters %d, state dict %d entries", NumParameters(n), len(StateDict(n)))
	}
	ids := []int{1, 3}
	run := func(useEmb, useHead bool) []float32 {
		emb.Weight.SetGrad(nil)
		x := emb.Lookup(ids, 2)
		if !useEmb {
			x = x.Detach()
		}
		y := tensor.Linear(x, head.Weight, nil)
		if !useHead {
			y = tensor.Linear(x, head.Weight.Detach(), nil)
		}
		if err := tensor.Sum(tensor.Mul(y, y), false).Backward(); err != nil {
			t.Fatal(err)
		}
		return append([]float32(nil), emb.Weight.Grad().Data()...)
	}
	onlyEmb, onlyHead := run(true, false), run(false, true)
	fired, after := 0, 0
	remove := emb.Weight.AddGradHook(func(_ *tensor.Pass, p *tensor.Tensor) {
		fired++
		for i, g := range p.Grad().Data() {
			if d := g - (onlyEmb[i] + onlyHead[i]); d > 1e-5 || d < -1e-5 {
				after++
			}
		}
	})
	defer remove()
	run(true, true)
	if fired != 1 || after != 0 {
		t.Fatalf("hook fired %d times, %d gradient entries not yet the sum of both uses", fired, after)
	}
}
