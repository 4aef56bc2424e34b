package gptjob

import (
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"

	"github.com/gotrain/gotrain/data"
	"github.com/gotrain/gotrain/harness"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/nn/models"
	"github.com/gotrain/gotrain/tensor"
)

// Step is one optimizer step on a batch: the PyTorch loop of nanoGPT,
// marking its phases on s. It returns this rank's loss.
func (j *job) Step(ctx context.Context, s harness.Step, b data.Batch) (float64, error) {
	loss, err := j.step(ctx, s, b)
	collectIfDue()
	return loss, err
}

// step is Step without the garbage collection.
func (j *job) step(ctx context.Context, s harness.Step, b data.Batch) (float64, error) {
	B, T := b.Len(), b.T
	// A token id outside the vocabulary, named by its file and position.
	if err := j.data.dataErr(); err != nil {
		return 0, fmt.Errorf("gptjob: %w", err)
	}
	if err := j.model.Check(b.Inputs, B, T); err != nil {
		return 0, fmt.Errorf("gptjob: %w", err)
	}
	j.opt.ZeroGrad()
	var logits, loss *tensor.Tensor
	// The loss, like every op but the matmuls, is float32 under autocast.
	j.run.Autocast(func() {
		logits = j.replica.Forward(nn.IDTensor(b.Inputs, B, T))
		loss = tensor.CrossEntropyIgnore(logits, b.Targets, models.IgnoreIndex, "mean")
	})
	s.Forwarded()
	// Nothing but the graph reads the logits: Backward hands their
	// storage (the largest activation) back to the buffer pool rather
	// than leaving it as garbage every step.
	tensor.Recycle(logits)
	// A failed allreduce (a dead peer) surfaces here, never as a hang.
	if err := loss.Backward(); err != nil {
		return 0, err
	}
	s.Backwarded()
	// Backward has left the averaged gradients in place: every rank
	// clips by the same norm.
	var norm float64
	if clip := *j.cfg.GradClip; clip > 0 {
		var err error
		if norm, err = j.run.ClipGradNorm(ctx, j.params, clip); err != nil {
			return 0, err
		}
	}
	// A NaN or infinite loss or norm: --on-nan says whether to update.
	l := float64(loss.Item())
	update, err := s.Update(ctx, l, norm)
	if err != nil {
		return 0, err
	}
	if update {
		j.opt.Step()
	}
	j.sched.Step() // a skipped step counts: the schedule follows the steps
	return l, nil
}

// Evaluate is rank 0's validation loss, with the learning rate the next
// step trains at.
func (j *job) Evaluate(context.Context) ([]harness.Metric, error) {
	j.valLoss = j.evaluate()
	if err := j.data.dataErr(); err != nil {
		return nil, fmt.Errorf("gptjob: %w", err)
	}
	return []harness.Metric{{Name: "val_loss", Value: j.valLoss}, {Name: "lr", Value: j.opt.LR(), Format: "%.3g"}}, nil
}

// gcBudget is how far the heap may grow past the live data of the last
// collection before the training loop collects: a steady step leaves
// about a megabyte of garbage (graph nodes, closures, small temporaries),
// so this collects every few steps.
const gcBudget = 4 << 20

// collectIfDue runs the garbage collector once the heap has grown by
// gcBudget since the last collection. The buffer pool keeps a step's
// activations (about 250 MiB at the default size) as live heap, and the
// collector's default pace (GOGC=100) lets garbage grow as large as the
// live heap before collecting, so without this a long run's resident
// memory creeps up to twice the working set. Collecting a heap of
// pointer-free buffers takes a few milliseconds, against steps of
// hundreds.
func collectIfDue() {
	s := [2]metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/live:bytes"}}
	metrics.Read(s[:])
	if s[0].Value.Kind() == metrics.KindUint64 && s[1].Value.Kind() == metrics.KindUint64 &&
		s[0].Value.Uint64() > s[1].Value.Uint64()+gcBudget {
		runtime.GC()
	}
}

// evalChunk is how many windows one forward pass of the evaluation takes:
// without a backward pass the intermediate results are not recycled, so
// smaller passes keep the peak memory near training's.
const evalChunk = 8

// evaluate returns the mean loss over the first EvalBatches batches of
// validation windows, in eval mode, on this process's replica: each
// batch's loss is the mean over its windows, computed evalChunk windows at
// a time.
func (j *job) evaluate() float64 {
	nn.SetTrain(j.model, false)
	defer nn.SetTrain(j.model, true)
	loader := data.NewSequenceLoader(j.valid, j.cfg.BatchSize, data.NewSequentialSampler(j.valid.Len()), data.Prefetch(0))
	// The pool's buffers are sized for training's batch, not these
	// chunks: drop them so that the pass reuses their memory instead of
	// adding its own on top (the next step refills the pool).
	tensor.ReleasePool()
	runtime.GC()
	var sum float64
	n := 0
	tensor.NoGrad(func() {
		j.run.Autocast(func() {
			for b := range loader.Batches() {
				T, batch := b.T, 0.0
				for lo := 0; lo < b.Len(); lo += evalChunk {
					hi := min(lo+evalChunk, b.Len())
					_, loss := j.model.Loss(b.Inputs[lo*T:hi*T], b.Targets[lo*T:hi*T], hi-lo, T)
					batch += float64(loss.Item()) * float64(hi-lo)
					// Nothing is recycled without a backward pass: collect
					// the pass's garbage now rather than when the heap has
					// doubled (the garbage collector's default pace).
					runtime.GC()
				}
				sum += batch / float64(b.Len())
				if n++; n == j.cfg.EvalBatches {
					break
				}
			}
		})
	})
	return sum / float64(n)
}

// generate samples n tokens (bytes for text data) from the model after a
// newline (as nanoGPT's sample.py starts), at cfg.Temperature (0: the
// most likely token each time), the context cropped to the block size,
// and decodes them with the data's tokenizer.
func (j *job) generate(n int) (string, error) {
	temperature, topK := float32(*j.cfg.Temperature), 0
	if temperature <= 0 {
		temperature, topK = 1, 1 // the top one alone: greedy
	}
	var ids []int
	var err error
	prompt := samplePrompt(j.tok, j.data.vocab)
	j.run.Autocast(func() { ids, err = j.model.Generate(prompt, n, temperature, topK, tensor.NewRNG(j.cfg.Seed+1)) })
	if err == nil {
		var s string
		if s, err = j.tok.Decode(ids[len(prompt):]); err == nil {
			return s, nil
		}
	}
	return "", fmt.Errorf("gptjob: sampling: %w", err)
}
