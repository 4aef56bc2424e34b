package nn

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/tensor"
)

// localStats is a StatsReducer of a job of one replica.
type localStats struct{ calls int }

func (l *localStats) ReduceStats([]float64) error { l.calls++; return nil }

// TestBatchNormLayerForwardReLU checks ForwardReLU against Forward, Add
// and ReLU on a twin layer: the outputs, the running statistics and the
// batch count, in training and then in eval, with and without a residual.
func TestBatchNormLayerForwardReLU(t *testing.T) {
	for _, withRes := range []bool{false, true} {
		rng := tensor.NewRNG(4)
		x := tensor.Zeros(3, 5, 4, 4)
		rng.FillUniform(x, -2, 2)
		var res *tensor.Tensor
		if withRes {
			res = tensor.Zeros(3, 5, 4, 4)
			rng.FillUniform(res, -1, 1)
		}
		fused, sep := BatchNorm2d(5), BatchNorm2d(5)
		rng.FillUniform(fused.Weight, 0.5, 1.5)
		copy(sep.Weight.Data(), fused.Weight.Data())
		for _, training := range []bool{true, true, false} {
			SetTrain(fused, training)
			SetTrain(sep, training)
			got := fused.ForwardReLU(x, res)
			want := sep.Forward(x)
			if res != nil {
				want = tensor.Add(want, res)
			}
			want = tensor.ReLU(want)
			name := fmt.Sprintf("residual=%v training=%v", withRes, training)
			if !slices.Equal(got.Data(), want.Data()) {
				t.Fatalf("%s: output differs from Forward, Add and ReLU", name)
			}
			for _, p := range []struct {
				what string
				a, b *tensor.Tensor
			}{{"running_mean", fused.RunningMean, sep.RunningMean}, {"running_var", fused.RunningVar, sep.RunningVar},
				{"num_batches_tracked", fused.NumBatchesTracked, sep.NumBatchesTracked}} {
				if !slices.Equal(p.a.Data(), p.b.Data()) {
					t.Fatalf("%s: %s %v, want %v", name, p.what, p.a.Data(), p.b.Data())
				}
			}
		}
		if n := fused.NumBatchesTracked.Data()[0]; n != 2 {
			t.Fatalf("num_batches_tracked = %v after two training batches, want 2", n)
		}
	}
}

// TestBatchNormLayerForwardReLUSync checks that a SyncBatchNorm layer's
// ForwardReLU reduces its statistics, counts the batch once and clips at 0.
func TestBatchNormLayerForwardReLUSync(t *testing.T) {
	b := BatchNorm2d(3)
	red := &localStats{}
	b.Sync = red
	x := tensor.Zeros(2, 3, 2, 2)
	tensor.NewRNG(1).FillUniform(x, -1, 1)
	y := b.ForwardReLU(x, nil)
	if red.calls != 1 || b.NumBatchesTracked.Data()[0] != 1 {
		t.Fatalf("reducer called %d times, num_batches_tracked %v; want 1 and 1", red.calls, b.NumBatchesTracked.Data()[0])
	}
	if slices.Min(y.Data()) != 0 || slices.Max(y.Data()) <= 0 {
		t.Fatalf("output %v is not a ReLU's of normalised values", y.Data())
	}
}

// TestBatchNormLayerForwardReLUBadInput checks the panics' messages.
func TestBatchNormLayerForwardReLUBadInput(t *testing.T) {
	for _, c := range []struct {
		x, res *tensor.Tensor
		want   string
	}{
		{tensor.Zeros(2, 4, 3, 3), nil, "BatchNorm2d(3): input [2 4 3 3] does not match num_features 3"},
		{tensor.Zeros(2, 3, 3, 3), tensor.Zeros(2, 3, 3, 2), "BatchNorm2d(3): residual [2 3 3 2] does not match input [2 3 3 3]"},
		{tensor.Zeros(1, 3, 1, 1), nil, "input [1 3 1 1] has 1 value per channel; training needs more than 1"},
	} {
		func() {
			defer func() {
				if msg := fmt.Sprint(recover()); !strings.Contains(msg, c.want) {
					t.Errorf("panic %q, want it to contain %q", msg, c.want)
				}
			}()
			BatchNorm2d(3).ForwardReLU(c.x, c.res)
		}()
	}
}
