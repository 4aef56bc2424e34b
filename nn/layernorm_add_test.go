package nn

import (
	"strings"
	"testing"

	"github.com/gotrain/gotrain/tensor"
)

// TestLayerNormAddForward checks that AddForward gives x + y and the
// layer's Forward of it, the same numbers, and that a wrong width panics
// naming the shape.
func TestLayerNormAddForward(t *testing.T) {
	l := LayerNorm(12)
	rng := tensor.NewRNG(8)
	tensor.NewRNG(9).FillNormal(l.Weight, 1, 0.2)
	x, y := tensor.Rand(rng, 2, 5, 12), tensor.Rand(rng, 2, 5, 12)
	sum, norm := l.AddForward(x, y)
	wantSum := tensor.Add(x, y)
	wantNorm := l.Forward(wantSum)
	for i, v := range wantNorm.Data() {
		if sum.Data()[i] != wantSum.Data()[i] || norm.Data()[i] != v {
			t.Fatalf("[%d]: sum %v norm %v, want %v %v", i, sum.Data()[i], norm.Data()[i], wantSum.Data()[i], v)
		}
	}
	defer func() {
		if r, _ := recover().(string); !strings.Contains(r, "[2 5 10]") {
			t.Fatalf("panic %q, want one naming the input shape", r)
		}
	}()
	l.AddForward(tensor.Rand(rng, 2, 5, 10), tensor.Rand(rng, 2, 5, 10))
}
