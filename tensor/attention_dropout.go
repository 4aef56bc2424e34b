package tensor

import (
	"fmt"
	"math"
)

// ScaledDotProductAttentionDropout is ScaledDotProductAttention with
// dropout on the attention probabilities while training, PyTorch's
// F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=causal):
// each probability is zeroed with probability p and the rest are scaled
// by 1/(1−p) before they weight the values. With p = 0 it is
// ScaledDotProductAttention.
//
// It stays fused: the mask is never stored. Each element's keep-or-drop
// is a hash of a seed drawn from rng once per call and of the element's
// head, query and key, so backward regenerates the very mask forward
// used, and the op holds no T×T tensor, as without dropout. The same rng
// state gives the same masks. It panics as ScaledDotProductAttention
// does, and if p is outside [0, 1].
func ScaledDotProductAttentionDropout(q, k, v *Tensor, causal bool, p float32, rng *RNG) *Tensor {
	if p == 0 {
		return ScaledDotProductAttention(q, k, v, causal)
	}
	drop := newAttnDropout("ScaledDotProductAttentionDropout", p, rng)
	if y, ok := autocastRounded([]*Tensor{q, k, v}, func(r []*Tensor) *Tensor {
		return sdpaDropout(r[0], r[1], r[2], causal, drop)
	}); ok {
		return y
	}
	return sdpaDropout(q, k, v, causal, drop)
}

func sdpaDropout(q, k, v *Tensor, causal bool, drop *attnDropout) *Tensor {
	a := newAttnGeom("ScaledDotProductAttentionDropout", q, k, v, causal)
	a.useCastGemm()
	a.drop = drop
	out := &Tensor{data: getBuf(len(q.data)), shape: append([]int(nil), q.shape...)}
	return a.run(out, q, k, v)
}

// SelfAttentionQKVDropout is SelfAttentionQKV with dropout p on the
// attention probabilities, fused and seeded from rng as
// ScaledDotProductAttentionDropout is: nanoGPT's attention in training
// with dropout, holding no T×T tensor. With p = 0 it is SelfAttentionQKV.
func SelfAttentionQKVDropout(qkv *Tensor, heads int, causal bool, p float32, rng *RNG) *Tensor {
	if p == 0 {
		return SelfAttentionQKV(qkv, heads, causal)
	}
	drop := newAttnDropout("SelfAttentionQKVDropout", p, rng)
	if y, ok := autocastRounded([]*Tensor{qkv}, func(r []*Tensor) *Tensor {
		return selfAttentionQKV(r[0], heads, causal, drop)
	}); ok {
		return y
	}
	return selfAttentionQKV(qkv, heads, causal, drop)
}

// selfAttentionQKV is SelfAttentionQKV outside emulated autocast, with
// dropout when drop is not nil.
func selfAttentionQKV(qkv *Tensor, heads int, causal bool, drop *attnDropout) *Tensor {
	s := qkv.shape
	if len(s) != 3 || heads <= 0 || s[2]%(3*heads) != 0 {
		panic(fmt.Sprintf("tensor: SelfAttentionQKV: qkv %v is not [B, T, 3·C] with C a multiple of %d heads", s, heads))
	}
	b, t, c := s[0], s[1], s[2]/3
	dh := c / heads
	a := attnGeom{
		heads: b * heads, nh: heads, tq: t, tk: t, dh: dh, causal: causal,
		packed: true, ldq: 3 * c, ldkv: 3 * c, ldo: c, drop: drop,
	}
	a.setBlocks()
	a.scale = float32(1 / math.Sqrt(float64(max(dh, 1))))
	a.useCastGemm()
	out := &Tensor{data: getBuf(b * t * c), shape: []int{b, t, c}}
	return a.run(out, qkv, qkv, qkv)
}

// attnDropout is one call's dropout of attention probabilities: element
// n (see attnGeom.dropIndex) is kept when the top 32 bits of
// hash(seed, n) are below keep·2³², and then scaled by scale.
type attnDropout struct {
	seed  uint64
	keep  uint64 // threshold on 32 bits; 1<<32 keeps everything
	scale float32
}

func newAttnDropout(op string, p float32, rng *RNG) *attnDropout {
	if !(p >= 0 && p <= 1) {
		panic(fmt.Sprintf("tensor: %s: probability %v outside [0, 1]", op, p))
	}
	d := &attnDropout{seed: rng.Uint64(), keep: uint64(math.Round(float64(1-p) * (1 << 32)))}
	if p < 1 {
		d.scale = 1 / (1 - p)
	}
	return d
}

// dropIndex numbers the probability of key j of query i of head h.
func (a attnGeom) dropIndex(h, i, j int) uint64 {
	return (uint64(h)*uint64(a.tq)+uint64(i))*uint64(a.tk) + uint64(j)
}

// apply multiplies row, the probabilities numbered n, n+1, ..., by their
// mask: scale where kept, 0 where dropped.
func (d *attnDropout) apply(row []float32, n uint64) {
	for c := range row {
		if d.keeps(n + uint64(c)) {
			row[c] *= d.scale
		} else {
			row[c] = 0
		}
	}
}

// keeps reports whether element n is kept: splitmix64's finalizer of the
// seed and n, whose bits are uniform whatever the pattern of n.
func (d *attnDropout) keeps(n uint64) bool {
	z := d.seed + (n+1)*0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	z ^= z >> 31
	return z>>32 < d.keep
}
