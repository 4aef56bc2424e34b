package main

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/testing/clustertest"
)

// dilocoModes are BenchmarkClusterDiLoCo's trainings of the GPT: DDP,
// LocalSGD and DiLoCo syncing every 20 and 100 steps, and streaming
// DiLoCo (4 fragments, bf16 outer gradients, each reduction overlapping
// the next step).
var dilocoModes = []struct {
	name string
	args []string
}{
	{"ddp", nil},
	{"localsgd20", []string{"--local-sgd", "20"}},
	{"diloco20", []string{"--diloco", "20"}},
	{"diloco100", []string{"--diloco", "100"}},
	{"streaming100", []string{"--diloco", "100", "--diloco-fragments", "4", "--diloco-bf16", "--diloco-delay", "1"}},
}

// BenchmarkClusterDiLoCo: 2 nodes × 1 worker on a tbf-shaped link
// (default 100 Mbit/s each way) train the default GPT for the same steps
// with each of dilocoModes (run by docs/bench/diloco.sh). Metrics per
// mode: tokens/s of all ranks, bytes rank 0 sends per token it trains
// (from its --metrics rows, every collective counted) and the final
// validation loss; each mode's tokens/s and validation loss over DDP's.
//
// BENCH_DILOCO_STEPS shortens the runs (default: the GPT's 1000 steps),
// BENCH_DILOCO_MODES picks modes (comma-separated names), and
// BENCH_DILOCO_RATE sets the link in bit/s.
func BenchmarkClusterDiLoCo(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	const batch, block = 8, 128
	steps, rate := 0, int64(100e6)
	if v := os.Getenv("BENCH_DILOCO_STEPS"); v != "" {
		if steps, err = strconv.Atoi(v); err != nil || steps < 1 {
			b.Fatalf("BENCH_DILOCO_STEPS=%q: want a number of steps ≥ 1", v)
		}
	}
	if v := os.Getenv("BENCH_DILOCO_RATE"); v != "" {
		if rate, err = strconv.ParseInt(v, 10, 64); err != nil || rate < 1 {
			b.Fatalf("BENCH_DILOCO_RATE=%q: want bits per second ≥ 1", v)
		}
	}
	want := map[string]bool{}
	if v := os.Getenv("BENCH_DILOCO_MODES"); v != "" {
		for _, m := range strings.Split(v, ",") {
			want[m] = true
		}
		for m := range want {
			known := false
			for _, d := range dilocoModes {
				known = known || d.name == m
			}
			if !known {
				b.Fatalf("BENCH_DILOCO_MODES: unknown mode %q", m)
			}
		}
	}
	c := clustertest.New(b, clustertest.Options{Hosts: 2, NoSSH: true})
	for _, h := range c.Hosts {
		h.Shape(b, rate, 0)
	}
	for i := 0; i < b.N; i++ {
		var base powerSGDRun
		for _, m := range dilocoModes {
			if len(want) > 0 && !want[m.name] {
				continue
			}
			args := append([]string{"gpt", "--batch-size", strconv.Itoa(batch), "--block-size", strconv.Itoa(block)}, m.args...)
			if steps > 0 {
				args = append(args, "--max-steps", strconv.Itoa(steps), "--eval-every", strconv.Itoa(steps))
			}
			r := runPowerSGDBench(b, c, exe, args)
			b.ReportMetric(r.summary["tokens_per_s"], m.name+"_tokens_per_s")
			b.ReportMetric(r.bytesPerStep/(batch*block), m.name+"_bytes_per_token")
			b.ReportMetric(r.summary["val_loss"], m.name+"_val_loss")
			if m.name == "ddp" {
				base = r
			} else if base.summary != nil {
				b.ReportMetric(r.summary["tokens_per_s"]/base.summary["tokens_per_s"], m.name+"_over_ddp_tokens_per_s")
				b.ReportMetric(r.summary["val_loss"]/base.summary["val_loss"], m.name+"_over_ddp_val_loss")
			}
		}
	}
}
