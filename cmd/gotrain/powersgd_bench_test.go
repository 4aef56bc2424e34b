package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testproc"
	"github.com/gotrain/gotrain/testing/clustertest"
)

// powerSGDRate is the link of BenchmarkClusterPowerSGD: 100 Mbit/s each
// way (tbf), the link on which PowerSGD's compression pays.
const powerSGDRate = 100e6

// BenchmarkClusterPowerSGD: 2 nodes × 1 worker on a 100 Mbit/s link
// train the MNIST MLP for an epoch with float32 allreduce, bf16 and
// PowerSGD at rank 1, 2 and 4, then the default GPT with allreduce and
// PowerSGD at rank 2 (run by docs/bench/powersgd.sh). Metrics per hook:
// payload bytes rank 0 sends per step (from its --metrics rows),
// samples/s and test accuracy; PowerSGD's samples/s over float32's
// (target ≥ 4 for the MLP) and its accuracy minus float32's (target ≥
// −0.005); for the GPT, the validation loss of each and PowerSGD's over
// allreduce's (target ≤ 1.03).
//
// BENCH_POWERSGD_MNIST_STEPS and BENCH_POWERSGD_GPT_STEPS shorten
// the runs (default: an epoch, and the GPT's 1000 steps);
// BENCH_POWERSGD_MODELS=mnist or gpt runs one part only.
func BenchmarkClusterPowerSGD(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	envInt := func(name string) int {
		v := os.Getenv(name)
		if v == "" {
			return 0
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("%s=%q: want a number of steps ≥ 1", name, v)
		}
		return n
	}
	mnistSteps, gptSteps := envInt("BENCH_POWERSGD_MNIST_STEPS"), envInt("BENCH_POWERSGD_GPT_STEPS")
	models := os.Getenv("BENCH_POWERSGD_MODELS")
	c := clustertest.New(b, clustertest.Options{Hosts: 2, NoSSH: true})
	for _, h := range c.Hosts {
		h.Shape(b, powerSGDRate, 0)
	}
	hooks := []struct {
		name string
		args []string
	}{
		{"fp32", []string{"--comm-hook", "allreduce"}},
		{"bf16", []string{"--comm-hook", "bf16"}},
		{"psgd1", []string{"--comm-hook", "powersgd", "--powersgd-rank", "1"}},
		{"psgd2", []string{"--comm-hook", "powersgd", "--powersgd-rank", "2"}},
		{"psgd4", []string{"--comm-hook", "powersgd", "--powersgd-rank", "4"}},
	}
	for i := 0; i < b.N; i++ {
		if models == "" || models == "mnist" {
			res := map[string]powerSGDRun{}
			for _, h := range hooks {
				args := append([]string{"mnist"}, h.args...)
				if mnistSteps > 0 {
					args = append(args, "--max-steps", strconv.Itoa(mnistSteps))
				}
				r := runPowerSGDBench(b, c, exe, args)
				res[h.name] = r
				b.ReportMetric(r.bytesPerStep, h.name+"_bytes_per_step")
				b.ReportMetric(r.summary["samples_per_s"], h.name+"_samples_per_s")
				b.ReportMetric(r.summary["test_acc"], h.name+"_test_acc")
			}
			for _, h := range hooks[1:] {
				b.ReportMetric(res[h.name].summary["samples_per_s"]/res["fp32"].summary["samples_per_s"], h.name+"_over_fp32_samples_per_s")
				b.ReportMetric(res[h.name].summary["test_acc"]-res["fp32"].summary["test_acc"], h.name+"_minus_fp32_test_acc")
			}
		}
		if models == "" || models == "gpt" {
			var loss [2]float64
			for k, h := range []struct {
				name string
				args []string
			}{hooks[0], hooks[3]} {
				args := append([]string{"gpt"}, h.args...)
				if gptSteps > 0 {
					args = append(args, "--max-steps", strconv.Itoa(gptSteps), "--eval-every", strconv.Itoa(gptSteps))
				}
				r := runPowerSGDBench(b, c, exe, args)
				loss[k] = r.summary["val_loss"]
				b.ReportMetric(r.bytesPerStep, "gpt_"+h.name+"_bytes_per_step")
				b.ReportMetric(r.summary["tokens_per_s"], "gpt_"+h.name+"_tokens_per_s")
				b.ReportMetric(loss[k], "gpt_"+h.name+"_val_loss")
			}
			b.ReportMetric(loss[1]/loss[0], "gpt_psgd2_over_fp32_val_loss")
		}
	}
}

// powerSGDRun is one training job's figures: rank 0's summary line and
// the payload bytes it sent per step.
type powerSGDRun struct {
	summary      map[string]float64
	bytesPerStep float64
}

// runPowerSGDBench trains `gotrain train <args>` on the two hosts of c,
// one worker each, and returns rank 0's figures.
func runPowerSGDBench(b *testing.B, c *clustertest.Cluster, exe string, args []string) powerSGDRun {
	b.Helper()
	dir := b.TempDir()
	metrics := filepath.Join(dir, "rank0.jsonl")
	outs := onHosts(b, c, 2*time.Hour, "",
		func(r int) []string {
			argv := []string{exe, "run", "--nnodes", "2", "--node-rank", strconv.Itoa(r), "--nproc-per-node", "1",
				"--master-addr", c.Hosts[0].Addr, "--master-port", "29500", exe, "train"}
			argv = append(argv, args...)
			argv = append(argv, "--progress=false", "--metrics", filepath.Join(dir, fmt.Sprintf("rank%d.jsonl", r)))
			return argv
		},
		func(int) []string {
			return []string{testproc.Env("gotrain"), "GOTRAIN_TOKEN=0123456789abcdef0123456789abcdef", "GOTRAIN_SHM=0"}
		})
	run := powerSGDRun{summary: map[string]float64{}}
	line := lastRank0Line(outs[0])
	for _, f := range strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "[rank0]: ")) {
		if k, v, ok := strings.Cut(f, "="); ok {
			if x, err := strconv.ParseFloat(v, 64); err == nil {
				run.summary[k] = x
			}
		}
	}
	if len(run.summary) == 0 {
		b.Fatalf("train %s: no summary in node 0's output:\n%s", strings.Join(args, " "), outs[0])
	}
	f, err := os.Open(metrics)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var sent, steps int64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var row struct {
			Rank      int              `json:"rank"`
			Steps     int64            `json:"steps"`
			BytesSent map[string]int64 `json:"bytes_sent"`
		}
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			b.Fatalf("%s: %v", metrics, err)
		}
		if row.Rank != 0 || row.Steps == 0 {
			continue // not a training row of rank 0
		}
		steps += row.Steps
		for _, n := range row.BytesSent {
			sent += n
		}
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	if steps == 0 {
		b.Fatalf("%s holds no step of rank 0", metrics)
	}
	run.bytesPerStep = float64(sent) / float64(steps)
	return run
}
