package kernels

// GELUGradBias is the backward pass of a GELU applied to a layer's output
// h = x·wᵀ + b, in one pass over the rows of g (rows × len(deriv)/rows):
// g becomes g·GELU'(h) (deriv holds GELU'(h), as GELU writes it) and, when
// gb is not nil, gb[j] += Σ_r g[r, j] of that product, the bias gradient.
// Each row is multiplied and then added while it is still in L1, where
// the unfused form reads the whole product a second time. With gb zero
// the sums equal SumRows over the product bit for bit.
func GELUGradBias(g, deriv, gb []float32, rows int) {
	if rows <= 0 || len(g) == 0 {
		return
	}
	n := len(g) / rows
	_, _ = g[rows*n-1], deriv[rows*n-1]
	if gb != nil {
		gb = gb[:n]
	}
	for r := 0; r < rows; r++ {
		gr := g[r*n : (r+1)*n]
		vec.mul(gr, deriv[r*n:(r+1)*n])
		if gb != nil {
			vec.add(gb, gr)
		}
	}
}
