package tensor

import (
	"fmt"
	"math"
	"testing"

	"github.com/gotrain/gotrain/internal/kernels"
)

// TestLinearBF16BiasBits checks Linear and LinearGELU under native bf16
// autocast, which store the product and then add the bias, against the
// bf16 kernel adding its product to rows prefilled with the bias: the same
// bits, each element one rounding of the float32 sum plus the bias. The
// shapes have rows and columns that are not whole 32-wide tiles and a K
// of more than one K block.
func TestLinearBF16BiasBits(t *testing.T) {
	if !BF16Native() {
		t.Skip("no native bf16 kernel on this CPU")
	}
	rng := NewRNG(21)
	for _, s := range [][3]int{{300, 96, 64}, {70, 40, 24}, {33, 19, 300}, {5, 513, 7}} {
		rows, outF, in := s[0], s[1], s[2]
		t.Run(fmt.Sprintf("rows=%d out=%d in=%d", rows, outF, in), func(t *testing.T) {
			x, w, b := randT(rng, -2, 2, rows, in), randT(rng, -1, 1, outF, in), randT(rng, -1, 1, outF)
			want := make([]float32, rows*outF)
			for r := range rows {
				copy(want[r*outF:], b.data)
			}
			kernels.SgemmBF16(false, true, rows, outF, in, 1, x.data, in, w.data, in, 1, want, outF)
			var lin, fused *Tensor
			if err := Autocast(BF16, func() { lin, fused = Linear(x, w, b), LinearGELU(x, w, b) }); err != nil {
				t.Fatal(err)
			}
			for i, v := range want {
				if math.Float32bits(lin.data[i]) != math.Float32bits(v) {
					t.Fatalf("Linear[%d] = %v, prefilled bias %v", i, lin.data[i], v)
				}
			}
			gelu := make([]float32, len(want))
			kernels.GELU(gelu, make([]float32, len(want)), want)
			for i, v := range gelu {
				if math.Float32bits(fused.data[i]) != math.Float32bits(v) {
					t.Fatalf("LinearGELU[%d] = %v, GELU of the prefilled product %v", i, fused.data[i], v)
				}
			}
		})
	}
}
