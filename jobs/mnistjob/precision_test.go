package mnistjob

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/harness"
	"github.com/gotrain/gotrain/tensor"
)

// TestBF16ReachesFP32Accuracy trains the MLP for an epoch in float32 and
// in (emulated) bf16 mixed precision from the same seed: bf16 must reach
// the float32 test accuracy within 0.5 points. Both runs are
// deterministic, so the test is not flaky; with a native bf16 kernel the
// summation order may differ, not the precision.
func TestBF16ReachesFP32Accuracy(t *testing.T) {
	if testing.Short() {
		t.Skip("trains two MNIST epochs")
	}
	fp32, out32 := runLocal(t, Config{Config: harness.Config{Precision: "fp32"}})
	bf16, out := runLocal(t, Config{Config: harness.Config{Precision: "bf16-emulated"}})
	t.Logf("test accuracy fp32 %.4f, bf16 %.4f", fp32.TestAccuracy, bf16.TestAccuracy)
	if fp32.TestAccuracy < 0.9 {
		t.Fatalf("fp32 test accuracy %.4f after an epoch; want above 0.9", fp32.TestAccuracy)
	}
	if d := fp32.TestAccuracy - bf16.TestAccuracy; d > 0.005 {
		t.Fatalf("bf16 test accuracy %.4f is %.2f points below fp32's %.4f", bf16.TestAccuracy, 100*d, fp32.TestAccuracy)
	}
	if !strings.Contains(out, "bf16 emulated") {
		t.Errorf("no notice that bf16 is emulated in:\n%s", out)
	}
	// The epoch's loss line differs: bf16 really trained differently.
	if l32, l16 := lossLine(out32), lossLine(out); l32 == "" || l32 == l16 {
		t.Errorf("fp32 and bf16 report the same loss %q: autocast did not take effect", l32)
	}
	if tensor.AutocastPrecision() != tensor.FP32 || tensor.CheckPrecision(tensor.BF16) == nil && !tensor.BF16Native() {
		t.Error("the run left autocast or emulation on")
	}
}

func TestPrecisionRejected(t *testing.T) {
	t.Setenv("WORLD_SIZE", "")
	_, err := Run(context.Background(), Config{MaxSteps: 1, Config: harness.Config{Precision: "fp16", Out: io.Discard}})
	if err == nil || !strings.Contains(err.Error(), `Precision "fp16": want fp32, bf16 or bf16-emulated`) {
		t.Errorf("Precision fp16: %v", err)
	}
	if tensor.BF16Native() {
		return
	}
	_, err = Run(context.Background(), Config{MaxSteps: 1, Config: harness.Config{Precision: "bf16", Out: io.Discard}})
	if err == nil || !strings.Contains(err.Error(), "Precision bf16: bf16 not supported: this CPU") || strings.Contains(err.Error(), "\n") {
		t.Errorf("Precision bf16 without a bf16 kernel: %v; want one line naming the CPU", err)
	}
}

// lossLine returns the first output line reporting a training loss.
func lossLine(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "loss") {
			return l
		}
	}
	return ""
}

// TestBF16NativeReachesFP32Accuracy is TestBF16ReachesFP32Accuracy on the
// native bf16 kernel, where the CPU has one.
func TestBF16NativeReachesFP32Accuracy(t *testing.T) {
	if testing.Short() {
		t.Skip("trains two MNIST epochs")
	}
	if !tensor.BF16Native() {
		t.Skip("no native bf16 kernel on this CPU")
	}
	fp32, out32 := runLocal(t, Config{Config: harness.Config{Precision: "fp32"}})
	bf16, out := runLocal(t, Config{Config: harness.Config{Precision: "bf16"}})
	t.Logf("test accuracy fp32 %.4f, bf16 %.4f", fp32.TestAccuracy, bf16.TestAccuracy)
	if d := fp32.TestAccuracy - bf16.TestAccuracy; d > 0.005 {
		t.Fatalf("bf16 test accuracy %.4f is %.2f points below fp32's %.4f", bf16.TestAccuracy, 100*d, fp32.TestAccuracy)
	}
	if l32, l16 := lossLine(out32), lossLine(out); l32 == "" || l32 == l16 {
		t.Errorf("fp32 and bf16 report the same loss %q: autocast did not take effect", l32)
	}
	if strings.Contains(out, "bf16 emulated") {
		t.Errorf("the native run says bf16 is emulated:\n%s", out)
	}
}
