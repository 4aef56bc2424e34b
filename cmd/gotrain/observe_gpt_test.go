package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/event"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/nn/models"
)

// TestTrainGPTMetricsAndTraceTwoWorkers trains 2 GPT workers over TCP
// with --metrics and --trace: every rank's rows are in the launcher's
// file, a token is a row's sample, the learning rate is the one each
// step trained at, bytes went to the peer, and the merged trace holds
// each rank's phases and bucket allreduces and rank 0's evaluations and
// checkpoint saves.
func TestTrainGPTMetricsAndTraceTwoWorkers(t *testing.T) {
	t.Setenv("GOTRAIN_SHM", "0") // over TCP, so bytes per peer move
	dir := t.TempDir()
	file, trace := filepath.Join(dir, "metrics.jsonl"), filepath.Join(dir, "trace.json")
	const steps, batch, block = 12, 4, 32
	all, _, code := runGotrain(t, 60*time.Second, "train", "gpt", "--nproc-per-node", "2",
		"--n-layer", "1", "--n-head", "2", "--n-embd", "32", "--block-size", fmt.Sprint(block), "--batch-size", fmt.Sprint(batch),
		"--max-steps", fmt.Sprint(steps), "--eval-every", "6", "--eval-batches", "2", "--warmup-steps", "2", "--lr", "1e-2",
		"--metrics", file, "--trace", trace, "--save", filepath.Join(dir, "gpt.safetensors"), "--save-every", "4")
	if code != 0 {
		t.Fatalf("exit code %d; output:\n%s", code, all)
	}
	byRank := map[int][]event.Row{}
	for _, r := range readRows(t, file) {
		byRank[r.Rank] = append(byRank[r.Rank], r)
	}
	if len(byRank) != 2 || len(byRank[0]) != steps || len(byRank[1]) != steps {
		t.Fatalf("rows of ranks %v (%d and %d rows), want %d of ranks 0 and 1", keys(byRank), len(byRank[0]), len(byRank[1]), steps)
	}
	// The warm-up starts at --lr/100 and reaches --lr at step 3; both
	// ranks step by the same schedule.
	for i, want := range map[int]float64{0: 1e-4, 2: 1e-2} {
		if lr := byRank[0][i].LR; math.Abs(lr-want) > 1e-9 {
			t.Errorf("step %d: lr %v, want %v (the rate the step trained at)", i+1, lr, want)
		}
	}
	for i := range steps {
		if byRank[0][i].LR != byRank[1][i].LR {
			t.Fatalf("step %d: lr %v on rank 0, %v on rank 1", i+1, byRank[0][i].LR, byRank[1][i].LR)
		}
	}

	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents []event.TraceEvent `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatalf("trace is not trace-event JSON: %v", err)
	}
	count := map[string]int{}
	untimed := map[int]float64{} // evaluations and checkpoints between steps, in ms
	for _, e := range tr.TraceEvents {
		if e.Ph != "X" {
			continue
		}
		if e.Dur < 0 || e.TS <= 0 {
			t.Fatalf("span %+v", e)
		}
		if (e.Name == "checkpoint" || e.Name == "evaluate") && e.TS/1e6 < byRank[e.PID][steps-1].Time {
			untimed[e.PID] += e.Dur / 1e3
		}
		name := e.Name
		if strings.HasPrefix(name, "allreduce bucket ") {
			name = "allreduce"
			if e.TID != event.TIDAllReduce {
				t.Fatalf("allreduce span on track %d: %+v", e.TID, e)
			}
		}
		count[fmt.Sprintf("%d/%s", e.PID, name)]++
	}
	var params int
	for _, p := range nn.Parameters(models.GPT(models.GPTConfig{VocabSize: 256, BlockSize: block, NLayer: 1, NHead: 2, NEmbd: 32, Bias: true})) {
		params += p.Len()
	}
	for rank, rows := range byRank {
		checkRankRows(t, rank, rows, steps, batch*block, untimed[rank])
		peer := fmt.Sprint(1 - rank)
		var sent int64
		for _, r := range rows {
			sent += r.BytesSent[peer]
		}
		// Each step's allreduce of the float32 gradients sends about half
		// of them to the peer.
		if sent < int64(steps*params*4/2) {
			t.Fatalf("rank %d sent %d bytes to rank %s in %d steps of %d gradients", rank, sent, peer, steps, params)
		}
	}

	// Rank 0 evaluates at steps 6 and 12 and saves at steps 4 and 8 and
	// at the end.
	if count["0/checkpoint"] != 3 || count["0/evaluate"] != 2 || count["1/checkpoint"] != 0 || count["1/evaluate"] != 0 {
		t.Errorf("checkpoint and evaluate spans: %v", count)
	}
	for rank := range 2 {
		for _, name := range []string{"data", "forward", "backward", "optimizer"} {
			if n := count[fmt.Sprintf("%d/%s", rank, name)]; n != steps {
				t.Errorf("rank %d: %d %s spans, want %d", rank, n, name, steps)
			}
		}
		if n := count[fmt.Sprintf("%d/allreduce", rank)]; n < steps {
			t.Errorf("rank %d: %d allreduce spans in %d steps", rank, n, steps)
		}
	}
}

// TestTrainGPTObserveFlagErrors are one clear line each, exit status 2.
func TestTrainGPTObserveFlagErrors(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--dashboard", "127.0.0.1:0", "--dashboard-linger", "-1s"}, "gotrain: --dashboard-linger -1s: want a duration like 60s or 10m"},
		{[]string{"--nproc-per-node", "2", "--dashboard", "nope"}, "gotrain: --dashboard nope: want HOST:PORT or :PORT"},
		{[]string{"--metrics-every", "0"}, "gotrain: --metrics-every 0: must be at least 1"},
		{[]string{"--metrics", "/no/such/dir/m.jsonl"}, "gotrain: --metrics /no/such/dir/m.jsonl: directory /no/such/dir does not exist"},
		{[]string{"--nproc-per-node", "2", "--trace", "t.json", "--progress=false"}, "gotrain: --trace: needs --progress"},
		{[]string{"--flight-dir", notDir}, "gotrain: --flight-dir " + notDir + ": exists and is not a directory"},
	} {
		args := append([]string{"train", "gpt"}, tc.args...)
		all, _, code := runGotrain(t, 30*time.Second, args...)
		out := strings.TrimSuffix(all, "\n")
		if code != exitUsage || !strings.HasPrefix(out, tc.want) || strings.Contains(out, "\n") {
			t.Errorf("gotrain %s: exit %d, output %q; want one line starting %q", strings.Join(args, " "), code, all, tc.want)
		}
	}
}
