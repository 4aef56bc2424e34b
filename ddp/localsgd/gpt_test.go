package localsgd

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/gotrain/gotrain/ddp"
	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/nn/models"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

var gptCfg = models.GPTConfig{VocabSize: 16, BlockSize: 16, NLayer: 2, NHead: 2, NEmbd: 32, Bias: true}

// buildMu serialises model construction: nn's init generator is global.
var buildMu sync.Mutex

func newGPT() *models.GPTModel {
	buildMu.Lock()
	defer buildMu.Unlock()
	m := models.GPT(gptCfg)
	m.ResetParameters(tensor.NewRNG(7))
	return m
}

// gptBatch is a batch of b sequences of t+1 tokens from seed: each an
// arithmetic progression mod the vocabulary with a random start and a
// stride of 1, 2 or 3, so that from the second token on the next one is
// determined by the two before it.
func gptBatch(seed uint64, b, t int) (ids, targets []int) {
	rng := tensor.NewRNG(seed)
	v := gptCfg.VocabSize
	for range b {
		a, stride := rng.Intn(v), 1+rng.Intn(3)
		for i := range t {
			ids = append(ids, (a+stride*i)%v)
			targets = append(targets, (a+stride*(i+1))%v)
		}
	}
	return ids, targets
}

// TestGPTDiLoCoNearDDP trains a small GPT at world 2 and 3 for 40 steps on the
// same batches (AdamW, lr 3e-3, the same seeds) with DDP and with DiLoCo
// (H=5, the paper's outer Nesterov SGD, lr 0.7, momentum 0.9), and
// compares their losses on held-out batches, DiLoCo's after a final
// Sync. Both must have learnt (below 60% of the initial ln 16 ≈ 2.77),
// and DiLoCo's loss be no more than 3% above DDP's: the claim of the
// DiLoCo paper at equal steps and data, which a user trades DDP's
// per-step allreduce for. (Here DiLoCo ends about 13% below DDP: the
// outer Nesterov step, lr 0.7 with momentum 0.9, moves θ_global by more
// than the replicas' mean progress. A wrong outer gradient — a sign, a
// missing average, a lost fragment — leaves it near the initial loss or
// diverging.)
func TestGPTDiLoCoNearDDP(t *testing.T) {
	for _, world := range []int{2, 3} {
		t.Run(fmt.Sprintf("world%d", world), func(t *testing.T) { testGPTDiLoCoNearDDP(t, world) })
	}
}

func testGPTDiLoCoNearDDP(t *testing.T, world int) {
	const steps, b, T = 40, 8, 12
	eval := func(m *models.GPTModel) float64 {
		var sum float64
		for i := range 4 {
			ids, targets := gptBatch(uint64(9000+i), b, T)
			var loss *tensor.Tensor
			tensor.NoGrad(func() { _, loss = m.Loss(ids, targets, b, T) })
			sum += float64(loss.Item())
		}
		return sum / 4
	}
	initial := eval(newGPT())
	train := func(diloco bool) float64 {
		var result float64
		runRanks(t, world, func(ctx context.Context, g *distributed.Group) error {
			model := newGPT()
			var params []*tensor.Tensor
			var after func() error
			if diloco {
				m, err := NewDiLoCo(ctx, model, g, 5)
				if err != nil {
					return err
				}
				defer m.Close()
				params, after = m.Parameters(), func() error { return m.AfterStep(ctx) }
				defer func() {
					if err := m.Sync(ctx); err == nil && g.Rank() == 0 {
						result = eval(model)
					}
				}()
			} else {
				dm, err := ddp.New(ctx, model, g)
				if err != nil {
					return err
				}
				defer dm.Close()
				params, after = dm.Parameters(), func() error { return nil }
				defer func() {
					if g.Rank() == 0 {
						result = eval(model)
					}
				}()
			}
			opt := optim.NewAdamW(params, 3e-3)
			for s := range steps {
				ids, targets := gptBatch(uint64(100*s+g.Rank()), b, T)
				opt.ZeroGrad()
				_, loss := model.Loss(ids, targets, b, T)
				if err := loss.Backward(); err != nil {
					return err
				}
				opt.Step()
				if err := after(); err != nil {
					return err
				}
			}
			return nil
		})
		return result
	}
	ddpLoss, dilocoLoss := train(false), train(true)
	t.Logf("held-out loss: initial %.4f, DDP %.4f, DiLoCo H=5 %.4f", initial, ddpLoss, dilocoLoss)
	if !(ddpLoss < 0.6*initial) || !(dilocoLoss < 0.6*initial) {
		t.Fatalf("did not learn: initial %.4f, DDP %.4f, DiLoCo %.4f", initial, ddpLoss, dilocoLoss)
	}
	if dilocoLoss > 1.03*ddpLoss {
		t.Errorf("DiLoCo's loss %.4f is more than 3%% above DDP's %.4f", dilocoLoss, ddpLoss)
	}
}
