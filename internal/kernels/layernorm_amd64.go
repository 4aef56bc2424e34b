//go:build !noasm

package kernels

// rowAsm reports whether the AVX2/FMA row kernels (layernorm_amd64.s,
// softmax_amd64.s) run.
func rowAsm() bool { return hasAVX2 }

// rowAVX512 reports whether the AVX-512 versions of the row kernels (Exp,
// ExpShiftSum, MaxOf, SubMul, Dot, GELU and LayerNorm's) run instead of
// the AVX2 ones: they need AVX-512F, and AVX2/FMA for their 8-float tails
// and reductions.
var rowAVX512 = hasAVX512 && hasAVX2

// n is a positive multiple of 8 in all of these. The AVX-512 versions
// (used when rowAVX512) give the AVX2 versions' bits, sums included.

//go:noescape
func sumSqDevAVX2(x *float32, n int, m float32) float32

//go:noescape
func sumSqDevAVX512(x *float32, n int, m float32) float32

//go:noescape
func layerNormAffineAVX2(out, x, w, b *float32, n int, m, rstd float32)

//go:noescape
func layerNormAffineAVX512(out, x, w, b *float32, n int, m, rstd float32)

//go:noescape
func layerNormGradStatsAVX2(pw, pb, x, gr, w *float32, n int, m, rstd float32) (sg, sgx float32)

//go:noescape
func layerNormGradStatsAVX512(pw, pb, x, gr, w *float32, n int, m, rstd float32) (sg, sgx float32)

//go:noescape
func layerNormGradInputAVX2(dx, x, gr, w *float32, n int, m, rstd, a, c float32, add int)

//go:noescape
func layerNormGradInputAVX512(dx, x, gr, w *float32, n int, m, rstd, a, c float32, add int)
