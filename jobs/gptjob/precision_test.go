package gptjob

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"math"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/tensor"
)

// precisionConfig is a GPT small enough to train 500 steps in a few
// seconds, far enough to learn more than byte frequencies: two blocks
// of width 32 on windows of 64 bytes.
func precisionConfig(precision string, log io.Writer) Config {
	cfg := tiny()
	cfg.NLayer, cfg.NHead, cfg.NEmbd, cfg.BlockSize, cfg.BatchSize = 2, 2, 32, 64, 8
	cfg.MaxSteps, cfg.EvalEvery, cfg.EvalBatches, cfg.WarmupSteps, cfg.LR = 500, 250, 16, new(20), 5e-3
	cfg.Precision = precision
	cfg.Logger = slog.New(slog.NewTextHandler(log, nil))
	return cfg
}

// TestBF16ReachesFP32ValLoss trains the same GPT from the same seed in
// float32 and in (emulated) bf16 mixed precision: bf16's validation loss
// must be within 3% of float32's. Both runs are deterministic, so the
// test is not flaky; with a native bf16 kernel only the summation order
// would differ, not the rounding.
func TestBF16ReachesFP32ValLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("trains two GPTs for 500 steps")
	}
	var log32, log16 bytes.Buffer
	fp32, err := Run(context.Background(), precisionConfig("fp32", &log32))
	if err != nil {
		t.Fatal(err)
	}
	bf16, err := Run(context.Background(), precisionConfig("bf16-emulated", &log16))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("val_loss fp32 %.4f, bf16-emulated %.4f (train_loss %.4f, %.4f)", fp32.ValLoss, bf16.ValLoss, fp32.TrainLoss, bf16.TrainLoss)
	// ln 256 = 5.55 untrained; byte frequencies alone give about 4.5.
	if fp32.ValLoss > 3 {
		t.Fatalf("fp32 val_loss %.4f after 500 steps; want below 3", fp32.ValLoss)
	}
	if r := bf16.ValLoss / fp32.ValLoss; math.IsNaN(r) || r > 1.03 {
		t.Fatalf("bf16 val_loss %.4f is %.1f%% above fp32's %.4f; want within 3%%", bf16.ValLoss, 100*(r-1), fp32.ValLoss)
	}
	// bf16 really trained differently: autocast took effect.
	if bf16.ValLoss == fp32.ValLoss || bf16.TrainLoss == fp32.TrainLoss {
		t.Fatalf("fp32 and bf16 end with the same losses %v, %v: autocast did not take effect", fp32.ValLoss, fp32.TrainLoss)
	}
	for _, c := range []struct {
		res  Result
		log  string
		want string
	}{{fp32, log32.String(), "fp32"}, {bf16, log16.String(), "bf16-emulated"}} {
		if c.res.Precision != c.want || !strings.HasSuffix(c.res.Summary(), " precision="+c.want) {
			t.Errorf("result precision %q, summary %q; want precision=%s", c.res.Precision, c.res.Summary(), c.want)
		}
		if !strings.Contains(c.log, "precision="+c.want) {
			t.Errorf("the data log line does not name precision=%s:\n%s", c.want, c.log)
		}
	}
	if !strings.Contains(log16.String(), "bf16 emulated") || strings.Contains(log32.String(), "bf16 emulated") {
		t.Errorf("want the notice that bf16 is emulated in the bf16 run's log only:\nfp32:\n%s\nbf16:\n%s", log32.String(), log16.String())
	}
	if tensor.AutocastPrecision() != tensor.FP32 || tensor.CheckPrecision(tensor.BF16) == nil && !tensor.BF16Native() {
		t.Error("the run left autocast or emulation on")
	}
}

// TestBF16WithDropoutSamples: with attention dropout the attention is
// unfused (batched MatMul, also under autocast); training, evaluation
// and sampling run in bf16 and leave float32 behind them.
func TestBF16WithDropoutSamples(t *testing.T) {
	cfg := tiny()
	cfg.Precision, cfg.Dropout, cfg.Sample = "bf16-emulated", 0.1, 20
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Precision != "bf16-emulated" || len(res.Sample) != 20 || !(res.ValLoss > 1 && res.ValLoss < 5.6) {
		t.Fatalf("result %+v", res)
	}
	if tensor.AutocastPrecision() != tensor.FP32 || tensor.CheckPrecision(tensor.BF16) == nil && !tensor.BF16Native() {
		t.Error("the run left autocast or emulation on")
	}
}

func TestPrecisionRejected(t *testing.T) {
	t.Setenv("WORLD_SIZE", "")
	for _, p := range []string{"fp16", "BF16", "bfloat16"} {
		cfg := tiny()
		cfg.Precision = p
		_, err := Run(context.Background(), cfg)
		if err == nil || err.Error() != `gptjob: harness: Precision "`+p+`": want fp32, bf16 or bf16-emulated` {
			t.Errorf("Precision %s: %v", p, err)
		}
	}
	if tensor.BF16Native() {
		return
	}
	cfg := tiny()
	cfg.Precision = "bf16"
	_, err := Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "Precision bf16: bf16 not supported: this CPU") || strings.Contains(err.Error(), "\n") {
		t.Errorf("Precision bf16 without a bf16 kernel: %v; want one line naming the CPU", err)
	}
}

// TestBF16NativeReachesFP32ValLoss is TestBF16ReachesFP32ValLoss on the
// native bf16 kernel, where the CPU has one.
func TestBF16NativeReachesFP32ValLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("trains two GPTs for 500 steps")
	}
	if !tensor.BF16Native() {
		t.Skip("no native bf16 kernel on this CPU")
	}
	fp32, err := Run(context.Background(), precisionConfig("fp32", io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	bf16, err := Run(context.Background(), precisionConfig("bf16", io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("val_loss fp32 %.4f, bf16 %.4f (train_loss %.4f, %.4f)", fp32.ValLoss, bf16.ValLoss, fp32.TrainLoss, bf16.TrainLoss)
	if r := bf16.ValLoss / fp32.ValLoss; math.IsNaN(r) || r > 1.03 {
		t.Fatalf("bf16 val_loss %.4f is %.1f%% above fp32's %.4f; want within 3%%", bf16.ValLoss, 100*(r-1), fp32.ValLoss)
	}
	if bf16.ValLoss == fp32.ValLoss || bf16.Precision != "bf16" {
		t.Fatalf("bf16 run: precision %q, val_loss %v (fp32 %v): autocast did not take effect", bf16.Precision, bf16.ValLoss, fp32.ValLoss)
	}
}
