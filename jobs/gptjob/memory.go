package gptjob

import (
	"fmt"

	"github.com/gotrain/gotrain/jobs/jobflag"
)

// The constants of MemoryEstimate's formula, from the peak RSS of runs
// of this job (fp32, one worker): 255 MiB for the defaults, growing by
// about 24 floats per token per unit of width per block.
const (
	// memBase is the runtime, the binary, the corpus and its windows.
	// A prepared dataset's shards are memory-mapped: the pages read are
	// page cache, shared by the ranks of a machine and reclaimable, not
	// counted here.
	memBase = 64 << 20
	// memStateCopies are the copies of the parameters a rank keeps:
	// weights, gradients, AdamW's two moments, DDP's bucket and a
	// checkpoint's state dict.
	memStateCopies = 6
	// memPerTokenWidth is the floats kept for backward per token, per
	// unit of width, per block: LayerNorms, q/k/v, the attention output,
	// the 4×-wide MLP and its GELU, and the residuals.
	memPerTokenWidth = 24
	// vocabSize is the byte-level tokenizer's vocabulary, the text
	// data's.
	vocabSize = 256
	// loaderWords are the 4-byte words the loader keeps per token of a
	// batch: inputs and targets as 8-byte ints, in three buffers.
	loaderWords = 3 * 2 * 2
)

// MemoryEstimate is the memory one rank needs at its peak, estimated as
//
//	64 MiB + 4 B × (6·P + B·T·(L·24·C + 4·C + 3·V + 12) + T²)
//
// with P = V·C + T·C + L·(12·C² + 13·C) + 2·C the parameters (the
// lm_head shares wte's weights), B the batch size, T the block size, L
// the blocks, C the width and V the vocabulary (256 for text, a prepared
// dataset's from its index): six copies of the
// parameters, the activations backward needs (24 floats per token and
// unit of width per block; the embeddings, the logits, their softmax and
// gradient), the loader's three buffers of inputs and targets, and one
// attention score matrix. It names the size flag that weighs most.
func (c Config) MemoryEstimate() jobflag.Memory {
	d := c.withDefaults()
	V := float64(dataVocab(d.Data))
	params := func() float64 {
		C, T, L := float64(d.NEmbd), float64(d.BlockSize), float64(d.NLayer)
		return V*C + T*C + L*(12*C*C+13*C) + 2*C
	}
	acts := func() float64 {
		B, C, T, L := float64(d.BatchSize), float64(d.NEmbd), float64(d.BlockSize), float64(d.NLayer)
		return B*T*(L*memPerTokenWidth*C+4*C+3*V+loaderWords) + T*T
	}
	bytes := func() float64 { return memBase + 4*(memStateCopies*params()+acts()) }
	parts := func() string {
		return fmt.Sprintf("%.3g parameters ×%d copies %s, activations and batches %s",
			params(), memStateCopies, jobflag.Bytes(4*memStateCopies*params()), jobflag.Bytes(4*acts()))
	}
	def := Config{}.withDefaults()
	return jobflag.Estimate(bytes, parts, []jobflag.Size{
		{Flag: "batch-size", Field: &d.BatchSize, Default: def.BatchSize},
		{Flag: "block-size", Field: &d.BlockSize, Default: def.BlockSize},
		{Flag: "n-embd", Field: &d.NEmbd, Default: def.NEmbd},
		{Flag: "n-layer", Field: &d.NLayer, Default: def.NLayer},
	})
}
