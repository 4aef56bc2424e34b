package tensor

import "github.com/gotrain/gotrain/internal/kernels"

// sumRowsSplitMin is the fewest elements of g per worker worth splitting
// a bias gradient's row sum over threads, and sumRowsColumnBlock the
// column granularity of the split (whole cache lines per row).
const (
	sumRowsSplitMin    = 1 << 16
	sumRowsColumnBlock = 16
)

// sumRows adds the rows of g (rows × len(dst)) into dst, as
// kernels.SumRows does, with the columns split over threads when g is
// large: each worker adds every row into its own columns in row order,
// so every element is the same sequence of additions as in one pass.
func sumRows(dst, g []float32, rows int) {
	n := len(dst)
	blocks := (n + sumRowsColumnBlock - 1) / sumRowsColumnBlock
	perBlock := rows * sumRowsColumnBlock
	if parallelWorkers(blocks, max(sumRowsSplitMin/max(perBlock, 1), 1)) <= 1 {
		kernels.SumRows(dst, g, rows)
		return
	}
	parallelFor(blocks, max(sumRowsSplitMin/perBlock, 1), func(_, lo, hi int) {
		j0, j1 := lo*sumRowsColumnBlock, min(hi*sumRowsColumnBlock, n)
		for r := 0; r < rows; r++ {
			kernels.Add(dst[j0:j1], g[r*n+j0:r*n+j1])
		}
	})
}
