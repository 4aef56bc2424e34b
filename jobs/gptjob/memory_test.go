package gptjob

import (
	"context"
	"testing"

	"github.com/gotrain/gotrain/harness"
	"github.com/gotrain/gotrain/tensor"
)

// TestStepsReturnPoolBuffers checks that a training step in its steady
// state hands back every buffer it takes from the tensor package's pool:
// after the first step, which fills the pool, later steps allocate no
// fresh poolable bytes and the pool holds the same bytes after each. A
// result kept out of the pool (as the logits once were) shows up as fresh
// bytes every step, and as resident memory that grows with the run.
func TestStepsReturnPoolBuffers(t *testing.T) {
	j, err := newJob(context.Background(), tiny())
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	if err := j.loadData(); err != nil {
		t.Fatal(err)
	}
	var held0, fresh0 int64
	step := 0
	for b := range j.loader.Batches() {
		if _, err := j.step(context.Background(), harness.Step{}, b); err != nil {
			t.Fatal(err)
		}
		step++
		held, fresh := tensor.PoolStats()
		if step == 2 {
			held0, fresh0 = held, fresh
		}
		if step > 2 && (held != held0 || fresh != fresh0) {
			t.Fatalf("step %d: pool holds %d bytes and allocated %d fresh bytes since step 2 (held %d then)", step, held, fresh-fresh0, held0)
		}
		if step == 6 {
			break
		}
	}
	if held0 == 0 {
		t.Fatal("the pool holds nothing after a step: nothing was recycled")
	}
}

// TestEvaluateReleasesPool checks that the evaluation pass empties the
// pool first, so that its differently sized buffers reuse the pool's
// memory rather than adding to it.
func TestEvaluateReleasesPool(t *testing.T) {
	j, err := newJob(context.Background(), tiny())
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	if err := j.loadData(); err != nil {
		t.Fatal(err)
	}
	for b := range j.loader.Batches() {
		if _, err := j.step(context.Background(), harness.Step{}, b); err != nil {
			t.Fatal(err)
		}
		break
	}
	trained, _ := tensor.PoolStats()
	if trained == 0 {
		t.Fatal("the pool holds nothing after a step")
	}
	j.evaluate()
	// Evaluation hands back only its own scratch (attention tiles).
	if held, _ := tensor.PoolStats(); held >= trained {
		t.Fatalf("the pool holds %d bytes after evaluation, %d before: it kept training's buffers", held, trained)
	}
}
