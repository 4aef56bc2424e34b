package nn_test

import (
	"math"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/nn/models"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// trainGPT trains a small GPT for steps AdamW steps from seed 1 and
// returns each step's loss and the final parameters.
func trainGPT(t *testing.T, checkpointing bool, dropout float32, steps int) ([]float32, [][]float32) {
	return trainGPTIn(t, tensor.FP32, checkpointing, dropout, steps)
}

// trainGPTIn is trainGPT with each forward pass under tensor.Autocast(prec)
// and backward after it, as the harness runs them.
func trainGPTIn(t *testing.T, prec tensor.Precision, checkpointing bool, dropout float32, steps int) ([]float32, [][]float32) {
	t.Helper()
	nn.SetSeed(1)
	m := models.GPT(models.GPTConfig{VocabSize: 17, BlockSize: 8, NLayer: 3, NHead: 2, NEmbd: 16, Dropout: dropout, Bias: true})
	m.ActivationCheckpointing = checkpointing
	opt := optim.NewAdamW(nn.Parameters(m), 1e-2)
	rng := tensor.NewRNG(7)
	const B, T = 3, 8
	var losses []float32
	for range steps {
		ids, targets := make([]int, B*T), make([]int, B*T)
		for i := range ids {
			ids[i], targets[i] = rng.Intn(17), rng.Intn(17)
		}
		opt.ZeroGrad()
		var loss *tensor.Tensor
		if err := tensor.Autocast(prec, func() { _, loss = m.Loss(ids, targets, B, T) }); err != nil {
			t.Fatal(err)
		}
		if err := loss.Backward(); err != nil {
			t.Fatal(err)
		}
		opt.Step()
		losses = append(losses, loss.Data()[0])
	}
	var params [][]float32
	for _, p := range nn.Parameters(m) {
		params = append(params, append([]float32(nil), p.Data()...))
	}
	return losses, params
}

// TestCheckpointedGPTIsExact: checkpointing every block changes nothing
// of training, bit for bit, with and without dropout (whose masks the
// recomputation replays).
func TestCheckpointedGPTIsExact(t *testing.T) {
	for _, p := range []float32{0, 0.3} {
		wantL, wantP := trainGPT(t, false, p, 4)
		gotL, gotP := trainGPT(t, true, p, 4)
		for i := range wantL {
			if math.Float32bits(gotL[i]) != math.Float32bits(wantL[i]) {
				t.Errorf("dropout %v step %d: loss %v with checkpointing, %v without", p, i, gotL[i], wantL[i])
			}
		}
		for i := range wantP {
			for j := range wantP[i] {
				if math.Float32bits(gotP[i][j]) != math.Float32bits(wantP[i][j]) {
					t.Fatalf("dropout %v: parameter %d element %d: %v with checkpointing, %v without", p, i, j, gotP[i][j], wantP[i][j])
				}
			}
		}
	}
	// Dropout must matter, or the test above proves nothing about the
	// replay.
	a, _ := trainGPT(t, false, 0, 1)
	b, _ := trainGPT(t, false, 0.3, 1)
	if a[0] == b[0] {
		t.Fatal("dropout 0.3 gave the loss of dropout 0")
	}
}

// TestCheckpointGradientMatches: a chain of ops through
// tensor.Checkpoint gives the values and gradients, for its input and
// for a leaf it uses, of the chain itself.
func TestCheckpointGradientMatches(t *testing.T) {
	w := tensor.New([]float32{0.5, -1, 2, 0.25}, 4).SetRequiresGrad(true)
	x0 := tensor.New([]float32{1, 2, -3, 0.5}, 4).SetRequiresGrad(true)
	f := func(x *tensor.Tensor) *tensor.Tensor {
		for range 5 {
			x = tensor.Tanh(tensor.Mul(x, w))
		}
		return x
	}
	run := func(ckpt bool) ([]float32, []float32, []float32) {
		w.SetGrad(nil)
		x0.SetGrad(nil)
		x := tensor.Mul(x0, x0)
		var y *tensor.Tensor
		if ckpt {
			y = tensor.Checkpoint(f, x)
		} else {
			y = f(x)
		}
		if err := tensor.Sum(y, false).Backward(); err != nil {
			t.Fatal(err)
		}
		return append([]float32(nil), y.Data()...), append([]float32(nil), w.Grad().Data()...), append([]float32(nil), x0.Grad().Data()...)
	}
	y1, gw1, gx1 := run(false)
	y2, gw2, gx2 := run(true)
	for i := range y1 {
		if y1[i] != y2[i] || gw1[i] != gw2[i] || gx1[i] != gx2[i] {
			t.Fatalf("element %d: y %v/%v, dw %v/%v, dx %v/%v (plain/checkpointed)", i, y1[i], y2[i], gw1[i], gw2[i], gx1[i], gx2[i])
		}
	}
}

// TestCheckpointHooks: the parameters' gradient hooks fire once
// per backward pass, after the checkpointed op has added into them, and
// the module's forward hooks see the checkpointed output.
func TestCheckpointHooks(t *testing.T) {
	l := nn.Linear(3, 2)
	var fired []string
	for _, np := range nn.NamedParameters(l) {
		np.Tensor.AddGradHook(func(_ *tensor.Pass, p *tensor.Tensor) {
			if p.Grad() == nil {
				t.Errorf("%s: hook fired without a gradient", np.Name)
			}
			fired = append(fired, np.Name)
		})
	}
	pre, post := 0, 0
	nn.RegisterForwardPreHook(l, func(nn.Module, *tensor.Tensor) { pre++ })
	nn.RegisterForwardHook(l, func(_ nn.Module, _, y *tensor.Tensor) {
		post++
		if y.IsLeaf() {
			t.Error("the forward hook saw an output without history")
		}
	})
	x := tensor.New([]float32{1, 2, 3, 4, 5, 6}, 2, 3).SetRequiresGrad(true)
	y := nn.CallCheckpointed(l, x)
	if err := tensor.Sum(y, false).Backward(); err != nil {
		t.Fatal(err)
	}
	if pre != 1 || post != 1 {
		t.Errorf("forward hooks ran %d and %d times, want once each", pre, post)
	}
	if got := strings.Join(fired, ","); len(fired) != 2 || !strings.Contains(got, "weight") || !strings.Contains(got, "bias") {
		t.Errorf("gradient hooks fired for %q, want weight and bias once each", got)
	}
	if g := x.Grad(); g == nil || g.Data()[0] == 0 {
		t.Errorf("input gradient %v", g)
	}
}

// TestCheckpointRejectsChangingFunction: a function that uses another
// parameter when recomputed is reported, naming the shape.
func TestCheckpointRejectsChangingFunction(t *testing.T) {
	a := tensor.New([]float32{1, 2}, 2).SetRequiresGrad(true)
	b := tensor.New([]float32{3, 4, 5}, 3).SetRequiresGrad(true)
	calls := 0
	f := func(x *tensor.Tensor) *tensor.Tensor {
		calls++
		if calls == 1 {
			return tensor.Mul(x, a)
		}
		return tensor.Add(tensor.Mul(x, a), tensor.Sum(b, false))
	}
	x := tensor.New([]float32{1, 1}, 2).SetRequiresGrad(true)
	y := tensor.Checkpoint(f, x)
	defer func() {
		r := recover()
		if s, _ := r.(string); !strings.Contains(s, "tensor: Checkpoint") || !strings.Contains(s, "[3]") {
			t.Fatalf("panic %v, want one naming the checkpoint and the shape [3]", r)
		}
	}()
	_ = tensor.Sum(y, false).Backward()
}

// TestCheckpointBatchNorm: a checkpointed module with BatchNorm in
// training mode gives the gradients of the plain one and updates its
// running statistics once per batch, not again in the recomputation.
func TestCheckpointBatchNorm(t *testing.T) {
	run := func(ckpt bool) (grad, mean, count []float32) {
		nn.SetSeed(3)
		m := nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.ReLU())
		x := tensor.Randn(tensor.NewRNG(9), 2, 1, 5, 5).SetRequiresGrad(true)
		var y *tensor.Tensor
		if ckpt {
			y = nn.CallCheckpointed(m, x)
		} else {
			y = nn.Call(m, x)
		}
		if err := tensor.Sum(tensor.Mul(y, y), false).Backward(); err != nil {
			t.Fatal(err)
		}
		bn := m.At(1).(*nn.BatchNormLayer)
		return append([]float32(nil), x.Grad().Data()...), append([]float32(nil), bn.RunningMean.Data()...), append([]float32(nil), bn.NumBatchesTracked.Data()...)
	}
	g1, m1, c1 := run(false)
	g2, m2, c2 := run(true)
	if c1[0] != 1 || c2[0] != 1 {
		t.Fatalf("batches tracked %v plain, %v checkpointed: want 1", c1, c2)
	}
	for i := range m1 {
		if m1[i] != m2[i] {
			t.Fatalf("running mean %v checkpointed, %v plain", m2, m1)
		}
	}
	for i := range g1 {
		if g1[i] != g2[i] {
			t.Fatalf("input gradient %d: %v checkpointed, %v plain", i, g2[i], g1[i])
		}
	}
}

// TestCheckpointedGPTUnderAutocast: a forward pass under bf16 autocast is
// recomputed in bf16 in the backward that runs after it, so the training
// is bitwise that without checkpointing, and differs from float32's.
func TestCheckpointedGPTUnderAutocast(t *testing.T) {
	defer tensor.SetBF16Emulation(tensor.SetBF16Emulation(true))
	want, _ := trainGPTIn(t, tensor.BF16, false, 0, 3)
	got, _ := trainGPTIn(t, tensor.BF16, true, 0, 3)
	fp32, _ := trainGPT(t, false, 0, 3)
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Errorf("step %d: loss %v with checkpointing, %v without", i, got[i], want[i])
		}
	}
	if want[2] == fp32[2] {
		t.Fatal("bf16 autocast gave float32's loss: the test compares nothing")
	}
}
