package kernels

import "math"

// DropoutMaskLen is the length of the bit mask DropoutMask16 and
// DropoutBackward16 take for n elements: a bit per element, rounded up to
// whole 16-bit pieces (element i is bit i%8 of byte i/8).
func DropoutMaskLen(n int) int { return (n + 15) / 16 * 2 }

// DropoutMask16 sets bit i of mask where the i-th 16-bit draw is below th
// (the element is kept) and clears it elsewhere, and sets out[i] to x[i]
// times scale where kept and times 0 where dropped. The draws are the
// 16-bit lanes of words, lowest first: element i takes bits 16·(i%4) up
// of words[i/4]. th is at most 1<<16. words must hold at least
// (len(x)+3)/4 values, mask DropoutMaskLen(len(x)) bytes.
//
// A bit mask is 1/32 of a float mask's memory traffic, and comparing
// whole vectors of draws saves the per-element work that dominates mask
// generation once the draws are made.
func DropoutMask16(out, x []float32, mask []byte, words []uint64, th uint32, scale float32) {
	n := len(x)
	out, mask, words = out[:n], mask[:DropoutMaskLen(n)], words[:(n+3)/4]
	done := dropoutMask16Vec(out, x, mask, words, th, scale)
	clear(mask[done/8:])
	sb := math.Float32bits(scale)
	for i := done; i < n; i++ {
		u := uint32(words[i/4]>>(16*(i%4))) & 0xffff
		// keep is 1 when u < th (u, th ≤ 2¹⁶, so u−th wraps): branch-free,
		// as keep-or-drop is a coin toss the predictor loses.
		keep := (u - th) >> 31
		mask[i/8] |= byte(keep << (i % 8))
		out[i] = x[i] * math.Float32frombits(-keep&sb)
	}
}

// DropoutBackward16 sets dx[i] to g[i] times scale where bit i of mask is
// set and times 0 where it is clear: the product DropoutMask16 formed in
// the forward pass, for the gradient.
func DropoutBackward16(dx, g []float32, mask []byte, scale float32) {
	n := len(g)
	dx, mask = dx[:n], mask[:DropoutMaskLen(n)]
	done := dropoutBackward16Vec(dx, g, mask, scale)
	for i := done; i < n; i++ {
		dx[i] = g[i] * DropoutMaskValue(mask, i, scale)
	}
}

// DropoutMaskValue is element i of the float mask a bit mask stands for:
// scale where bit i is set, else 0.
func DropoutMaskValue(mask []byte, i int, scale float32) float32 {
	keep := uint32(mask[i/8]>>(i%8)) & 1
	return math.Float32frombits(-keep & math.Float32bits(scale))
}
