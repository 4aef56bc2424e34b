package tensor

// Transpositions of the convolutions' weights and weight gradients, in
// blocks of convTransposeBlock rows so that both sides stream: a plain
// loop over a 512×4608 matrix touches a new cache line (and often a new
// page) on every element of its strided side.

// convTransposeBlock is the rows of the strided side read or written
// together: 16 floats fill a 64-byte line.
const convTransposeBlock = 16

// addTransposed adds src [cols, rows] transposed into dst [rows, cols]:
// dst[r·cols + j] += src[j·rows + r].
func addTransposed(dst, src []float32, rows, cols int) {
	for j0 := 0; j0 < cols; j0 += convTransposeBlock {
		j1 := min(j0+convTransposeBlock, cols)
		for r := range rows {
			d := dst[r*cols+j0 : r*cols+j1]
			for j := range d {
				d[j] += src[(j0+j)*rows+r]
			}
		}
	}
}

// tapMajor sets dst [(t, c), og] to src [og, (c, t)] for cg channels and
// kk taps: dst[(t·cg + c)·og + o] = src[(o·cg + c)·kk + t], a block of
// outputs o at a time, whose kk taps of channel c are then read together.
func tapMajor(dst, src []float32, og, cg, kk int) {
	for o0 := 0; o0 < og; o0 += convTransposeBlock {
		o1 := min(o0+convTransposeBlock, og)
		for c := range cg {
			for t := range kk {
				d := dst[(t*cg+c)*og+o0 : (t*cg+c)*og+o1]
				for o := range d {
					d[o] = src[((o0+o)*cg+c)*kk+t]
				}
			}
		}
	}
}
