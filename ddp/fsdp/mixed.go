package fsdp

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/gotrain/gotrain/tensor"
)

// MixedPrecisionPolicy sets the number formats of the collectives, as
// PyTorch's MixedPrecision(param_dtype, reduce_dtype): the shards, the
// optimizer state and the optimizer's update stay float32 (the master
// weights) whatever it says.
type MixedPrecisionPolicy struct {
	// Param is the format parameters are gathered in: with tensor.BF16
	// the full parameters the forward pass uses are the shards rounded to
	// bfloat16, and gathering moves half the bytes.
	Param tensor.Precision
	// Reduce is the format gradients are reduced in: with tensor.BF16
	// each rank's gradient, divided by the group size, is rounded to
	// bfloat16 and the pieces are summed in float32 in rank order, so the
	// result is the same on every rank.
	Reduce tensor.Precision
}

// MixedPrecision sets the formats of the gathers and reductions (default
// float32 for both). Under HybridShard the allreduce across nodes stays
// float32.
func MixedPrecision(p MixedPrecisionPolicy) Option {
	return func(c *config) { c.mixed = p }
}

func checkMixed(p MixedPrecisionPolicy) error {
	for _, f := range []struct {
		what string
		p    tensor.Precision
	}{{"Param", p.Param}, {"Reduce", p.Reduce}} {
		if f.p != tensor.FP32 && f.p != tensor.BF16 {
			return fmt.Errorf("fsdp: MixedPrecision: %s precision %v: want fp32 or bf16", f.what, f.p)
		}
	}
	return nil
}

// words is the number of int32 words holding n bfloat16 values: the
// collectives move 32- and 64-bit types.
func words(n int) int { return (n + 1) / 2 }

// halves views w as 2·len(w) bfloat16 values.
func halves(w []int32) []uint16 {
	if len(w) == 0 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(w))), 2*len(w))
}

// encodeBF16 rounds src·scale into dst's first len(src) halves and zeroes
// the rest.
func encodeBF16(dst []int32, src []float32, scale float32) {
	h := halves(dst)
	for i, v := range src {
		h[i] = uint16(tensor.ToBFloat16(v * scale))
	}
	clear(h[len(src):])
}

// decodeBF16 writes the first len(dst) halves of src to dst.
func decodeBF16(dst []float32, src []int32) {
	h := halves(src)
	for i := range dst {
		dst[i] = math.Float32frombits(uint32(h[i]) << 16)
	}
}

// decodeAddBF16 adds the first len(dst) halves of src to dst.
func decodeAddBF16(dst []float32, src []int32) {
	h := halves(src)
	for i := range dst {
		dst[i] += math.Float32frombits(uint32(h[i]) << 16)
	}
}

// startBF16 starts red's reduction in bfloat16: each rank's gradients
// divided by the group size and rounded, then summed in float32 in rank
// order. Strategies that keep the whole averaged gradient gather every
// rank's buffer; the others send each rank only its block (all-to-all).
func (m *Model) startBF16(red *reduction, u *unit) {
	g := m.shardG
	if m.cfg.strategy == NoShard {
		g = m.world
	}
	n := g.Size()
	scale := 1 / float32(n)
	if m.cfg.strategy == NoShard || m.cfg.strategy == ShardOptimizer {
		wn := words(len(red.send))
		sw, all := make([]int32, wn), make([]int32, n*wn)
		encodeBF16(sw, red.send, scale)
		red.work = g.AllGatherAsync(m.ctx, all, sw)
		full := red.send
		red.recv = full
		if m.cfg.strategy == ShardOptimizer {
			red.recv = full[m.sr*u.block : (m.sr+1)*u.block]
		}
		red.decode = func() {
			clear(full)
			for r := 0; r < n; r++ {
				decodeAddBF16(full, all[r*wn:(r+1)*wn])
			}
		}
		return
	}
	wb := words(u.block)
	sw, rw := make([]int32, n*wb), make([]int32, n*wb)
	for r := 0; r < n; r++ {
		encodeBF16(sw[r*wb:(r+1)*wb], red.send[r*u.block:(r+1)*u.block], scale)
	}
	red.work = g.AllToAllAsync(m.ctx, rw, sw)
	recv := make([]float32, u.block)
	red.recv = recv
	red.decode = func() {
		for r := 0; r < n; r++ {
			decodeAddBF16(recv, rw[r*wb:(r+1)*wb])
		}
	}
}
