package gptjob

import (
	"fmt"

	"github.com/gotrain/gotrain/harness"
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
	// memStateCopies are the copies of the parameters a rank keeps
	// under DDP: weights, gradients, AdamW's two moments, DDP's bucket
	// and a checkpoint's state dict.
	memStateCopies = 6
	// memPerTokenWidth is the floats kept for backward per token, per
	// unit of width, per block: LayerNorms, q/k/v, the attention output,
	// the 4×-wide MLP and its GELU, and the residuals.
	memPerTokenWidth = 24
	// memGatheredBlocks are the blocks' worth of full parameters and
	// communication buffers a FullShard rank holds at once: two blocks
	// gathered (the running one and the next, prefetched), their
	// all-gather buffers, and one block's full gradients with its
	// reduce-scatter buffer.
	memGatheredBlocks = 6
	// memShardedHeap is the heap a sharded rank grows to per byte live:
	// the harness sets the collector's target to 25% (GOGC=25) under
	// sharding.
	memShardedHeap = 1.25
	// vocabSize is the byte-level tokenizer's vocabulary, the text
	// data's.
	vocabSize = 256
	// loaderWords are the 4-byte words the loader keeps per token of a
	// batch: inputs and targets as 8-byte ints, in three buffers.
	loaderWords = 3 * 2 * 2
)

// keptProbs is the floats of attention probabilities forward keeps for
// backward over L blocks: with every key in one key block (T ≤ 128), a
// row of 128 per query, head and sequence (see
// tensor.ScaledDotProductAttention); longer sequences keep none.
func keptProbs(B, T, L, H float64) float64 {
	if T > attnKeyBlock {
		return 0
	}
	return L * B * H * T * attnKeyBlock
}

// attnKeyBlock is the fused attention's key block: up to this many keys,
// forward keeps the probabilities.
const attnKeyBlock = 128

// MemoryEstimate is MemoryEstimateWorld for the job's WorldSize (1 when
// unset).
func (c Config) MemoryEstimate() jobflag.Memory {
	return c.MemoryEstimateWorld(max(1, c.WorldSize))
}

// MemoryEstimateWorld is the memory one rank of world needs at its
// peak, estimated as
//
//	64 MiB + h × 4 B × (S + B·T·(k·C + 4·C + 3·V + 12) + T² + A)
//
// with P = V·C + T·C + L·U + 2·C the parameters (U = 12·C² + 13·C per
// block; the lm_head shares wte's weights), B the batch size, T the
// block size, L the blocks, C the width and V the vocabulary (256 for
// text, a prepared dataset's from its index); h is 1, or 1.25 under
// sharding (below). S is the training state,
// by Sharding with N = world ranks sharing it: 6·P under DDP (weights,
// gradients, AdamW's two moments, the bucket, a checkpoint's state
// dict); zero1 3·P + 4·P/N (full weights and gradients, the sharded
// rest, a consolidated copy); zero2 2·P + 4·P/N + 6·U; full and hybrid
// P + 4·P/N + 6·U (the consolidated copy rank 0 writes, the shards, and
// the blocks gathered at once), and a sharded rank's heap grows a
// quarter beyond its state and activations (the collector's target the
// harness sets). The activations backward needs are k =
// 24·L floats per token and unit of width, or with
// ActivationCheckpointing L + 24 (each block's input, and one block's
// activations while it is recomputed); then the embeddings, the logits,
// their softmax and gradient, the loader's three buffers of inputs and
// targets, and one attention score matrix. A is the attention
// probabilities kept for backward up to T = 128 without dropout, L·B·H·T·128
// with H the heads (one block's with ActivationCheckpointing), 0 otherwise.
// It names the size flag that weighs most.
func (c Config) MemoryEstimateWorld(world int) jobflag.Memory {
	d := c.withDefaults()
	V := float64(dataVocab(d.Data))
	params := func() float64 {
		C, T, L := float64(d.NEmbd), float64(d.BlockSize), float64(d.NLayer)
		return V*C + T*C + L*(12*C*C+13*C) + 2*C
	}
	state := func() float64 {
		P, C := params(), float64(d.NEmbd)
		U := 12*C*C + 13*C
		N := float64(max(1, world))
		switch {
		case world <= 1 || d.Sharding == "" || d.Sharding == harness.ShardNone:
			return memStateCopies * P
		case d.Sharding == harness.ShardZero1:
			return 3*P + 4*P/N
		case d.Sharding == harness.ShardZero2:
			return 2*P + 4*P/N + memGatheredBlocks*U
		default: // full, hybrid
			return P + 4*P/N + memGatheredBlocks*U
		}
	}
	acts := func() float64 {
		B, C, T, L := float64(d.BatchSize), float64(d.NEmbd), float64(d.BlockSize), float64(d.NLayer)
		kept, probLayers := L*memPerTokenWidth, L
		if d.ActivationCheckpointing {
			kept, probLayers = L+memPerTokenWidth, 1
		}
		probs := 0.0
		if d.Dropout == 0 {
			probs = keptProbs(B, T, probLayers, float64(d.NHead))
		}
		return B*T*(kept*C+4*C+3*V+loaderWords) + T*T + probs
	}
	sharded := world > 1 && d.Sharding != "" && d.Sharding != harness.ShardNone
	bytes := func() float64 {
		if sharded {
			return memBase + memShardedHeap*4*(state()+acts())
		}
		return memBase + 4*(state()+acts())
	}
	parts := func() string {
		how := fmt.Sprintf("×%d copies", memStateCopies)
		if sharded {
			how = fmt.Sprintf("sharded %s over %d", d.Sharding, world)
		}
		return fmt.Sprintf("%.3g parameters %s %s, activations and batches %s",
			params(), how, jobflag.Bytes(4*state()), jobflag.Bytes(4*acts()))
	}
	def := Config{}.withDefaults()
	return jobflag.Estimate(bytes, parts, []jobflag.Size{
		{Flag: "batch-size", Field: &d.BatchSize, Default: def.BatchSize},
		{Flag: "block-size", Field: &d.BlockSize, Default: def.BlockSize},
		{Flag: "n-embd", Field: &d.NEmbd, Default: def.NEmbd},
		{Flag: "n-layer", Field: &d.NLayer, Default: def.NLayer},
	})
}
