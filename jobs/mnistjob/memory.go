package mnistjob

import (
	"fmt"

	"github.com/gotrain/gotrain/jobs/jobflag"
)

// The constants of MemoryEstimate's formula, from the peak RSS of runs
// of this job (fp32, one worker): 164 MiB for the MLP at batch 64, 353
// MiB at 8192; 315 MiB for the CNN at 64, 945 MiB at 1024.
const (
	// memBase is the runtime, the binary and MNIST decoded.
	memBase = 176 << 20
	// memStateCopies are the copies of the parameters a rank keeps:
	// weights, gradients, two of optimizer state (Adadelta, Adam) and
	// DDP's bucket.
	memStateCopies = 5
	// evalBatch is Evaluate's batch size.
	evalBatch = 200
	// trainSamples is the size of MNIST's training set: no batch holds
	// more.
	trainSamples = 60000
	// loaderFloats are the 4-byte words the loader keeps per sample of
	// the batch size in each of its three buffers (two prefetched): an
	// image's 784 floats and its label and index.
	loaderFloats = 3 * (784 + 4)
)

// models' parameters and the floats per sample a training step keeps.
var memModels = map[string]struct{ params, perSample float64 }{
	// 784-512-512-10: each layer's input, output and ReLU, and their
	// gradients.
	"mlp": {784*512 + 512 + 512*512 + 512 + 512*10 + 10, 2 * (784 + 6*512 + 3*10)},
	// pytorch/examples' Net: conv1 and conv2 outputs and their ReLUs
	// (32·26·26, 64·24·24), max-pool, dropout and flatten (64·12·12),
	// fc1 and fc2 with their activations, and the gradient of the
	// largest (conv2's output).
	"cnn": {32*9 + 32 + 64*32*9 + 64 + 9216*128 + 128 + 128*10 + 10,
		2*32*26*26 + 2*64*24*24 + 3*64*12*12 + 3*128 + 3*10 + 64*24*24},
}

// MemoryEstimate is the memory one rank needs at its peak, estimated as
//
//	176 MiB + 4 B × (5·P + max(min(B, 60000), 200)·S + B·2364)
//
// with P the model's parameters, B the batch size and S the floats a
// step keeps per sample (the MLP's 7 772, the CNN's 181 920; evaluation
// runs batches of 200): five copies of the parameters, the activations
// of the larger of a training batch (at most the training set) and an
// evaluation batch, and the loader's three buffers, which it sizes by
// the batch size. It names --batch-size, the one size flag.
func (c Config) MemoryEstimate() jobflag.Memory {
	d := c.withDefaults()
	m, ok := memModels[d.Model]
	if !ok {
		m = memModels["cnn"] // the larger, for a name CheckFlags refuses
	}
	acts := func() float64 { return max(min(float64(d.BatchSize), trainSamples), evalBatch) * m.perSample }
	loader := func() float64 { return float64(d.BatchSize) * loaderFloats }
	bytes := func() float64 { return memBase + 4*(memStateCopies*m.params+acts()+loader()) }
	parts := func() string {
		return fmt.Sprintf("parameters ×%d copies %s, activations %s, batch buffers %s",
			memStateCopies, jobflag.Bytes(4*memStateCopies*m.params), jobflag.Bytes(4*acts()), jobflag.Bytes(4*loader()))
	}
	def := Config{}.withDefaults()
	return jobflag.Estimate(bytes, parts, []jobflag.Size{{Flag: "batch-size", Field: &d.BatchSize, Default: def.BatchSize}})
}
