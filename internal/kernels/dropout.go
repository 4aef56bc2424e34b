package kernels

import "math"

// DropoutMask16 sets mask[i] to scale where the i-th 16-bit draw is below
// th and to 0 elsewhere, and out[i] to x[i]·mask[i]. The draws are the
// 16-bit lanes of words, lowest first: element i takes bits 16·(i%4) up
// of words[i/4]. th is at most 1<<16. words must hold at least
// (len(x)+3)/4 values; out and mask at least len(x).
//
// Writing mask and product in one pass saves reading the mask back, and
// comparing whole vectors of draws saves the per-element work that
// dominates mask generation once the draws are made.
func DropoutMask16(out, mask, x []float32, words []uint64, th uint32, scale float32) {
	n := len(x)
	out, mask, words = out[:n], mask[:n], words[:(n+3)/4]
	done := dropoutMask16Vec(out, mask, x, words, th, scale)
	sb := math.Float32bits(scale)
	for i := done; i < n; i++ {
		u := uint32(words[i/4]>>(16*(i%4))) & 0xffff
		// Branch-free: keep-or-drop is a coin toss the predictor loses.
		m := math.Float32frombits(uint32(-int32((u-th)>>31)) & sb)
		mask[i] = m
		out[i] = x[i] * m
	}
}
