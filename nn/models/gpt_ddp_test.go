package models

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/gotrain/gotrain/ddp"
	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/tensor"
)

// TestGPTTiedWeightUnderDDP trains one step of a GPT on two in-process
// DDP ranks with different batches. The tied wte/lm_head weight is used
// twice per forward pass: its grad-ready hook must fire once per backward,
// after both uses, so the averaged gradient holds both contributions of
// both ranks: the mean of the two single-process gradients.
func TestGPTTiedWeightUnderDDP(t *testing.T) {
	cfg := GPTConfig{VocabSize: 19, BlockSize: 8, NLayer: 2, NHead: 2, NEmbd: 8, Bias: true}
	const B, T = 2, 5
	batch := func(rank int) (ids, targets []int) {
		rng := tensor.NewRNG(uint64(100 + rank))
		for range B * T {
			ids = append(ids, rng.Intn(cfg.VocabSize))
			targets = append(targets, rng.Intn(cfg.VocabSize))
		}
		return ids, targets
	}
	build := func() *GPTModel {
		m := GPT(cfg)
		m.ResetParameters(tensor.NewRNG(5))
		return m
	}
	// Reference: each rank's local gradient of the tied weight, averaged.
	ref := make([]float32, cfg.VocabSize*cfg.NEmbd)
	for rank := range 2 {
		m := build()
		ids, targets := batch(rank)
		_, loss := m.Loss(ids, targets, B, T)
		if err := loss.Backward(); err != nil {
			t.Fatal(err)
		}
		for i, g := range m.WTE.Weight.Grad().Data() {
			ref[i] += g / 2
		}
	}

	store := "file://" + filepath.Join(t.TempDir(), "store")
	var wg sync.WaitGroup
	grads := make([][]float32, 2)
	fired := make([]int, 2)
	errs := make([]error, 2)
	for rank := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			pg, err := distributed.Init(ctx, distributed.Config{InitMethod: store, Rank: rank, WorldSize: 2})
			if err != nil {
				errs[rank] = err
				return
			}
			defer pg.Destroy()
			m := build()
			dm, err := ddp.New(ctx, m, pg)
			if err != nil {
				errs[rank] = err
				return
			}
			defer dm.Close()
			m.WTE.Weight.AddGradHook(func(*tensor.Pass, *tensor.Tensor) { fired[rank]++ })
			ids, targets := batch(rank)
			loss := tensor.CrossEntropyIgnore(dm.Forward(nn.IDTensor(ids, B, T)), targets, IgnoreIndex, "mean")
			if err := loss.Backward(); err != nil {
				errs[rank] = err
				return
			}
			grads[rank] = append([]float32(nil), m.WTE.Weight.Grad().Data()...)
		}()
	}
	wg.Wait()
	for rank, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", rank, err)
		}
	}
	for rank := range 2 {
		if fired[rank] != 1 {
			t.Errorf("rank %d: tied weight's grad hook fired %d times in one backward, want 1", rank, fired[rank])
		}
		for i, want := range ref {
			if d := grads[rank][i] - want; d > 1e-6 || d < -1e-6 {
				t.Fatalf("rank %d: averaged grad[%d] = %v, want mean of local gradients %v", rank, i, grads[rank][i], want)
			}
		}
	}
}
