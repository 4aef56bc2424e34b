package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/tensor"
)

// TestBadFlags: every refused flag value, argument and command exits 2
// with one line naming it, before any worker starts: no usage dump, no
// panic, no goroutine trace, whatever the number of workers.
func TestBadFlags(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	emptyDir := t.TempDir()
	noDir := filepath.Join(dir, "missing", "m.safetensors")
	train := func(args ...string) []string { return append([]string{"train", "mnist"}, args...) }
	run := func(args ...string) []string { return append(append([]string{"run"}, args...), "true") }
	cases := []struct {
		args []string
		want string // in the line: the flag, argument or command
	}{
		{[]string{"frobnicate"}, `"frobnicate"`},
		{[]string{"train", "cifar10"}, `"cifar10"`},
		{[]string{"bench", "nope"}, `"nope"`},
		{[]string{"train", "mnist", "extra"}, `"extra"`},
		{[]string{"run"}, "PROGRAM"},
		{[]string{"run", "/no/such/program"}, "/no/such/program"},
		{[]string{"store", "--addr", "nohostport"}, "--addr"},
		{[]string{"store", "--grace", "-1s"}, "--grace"},
		{[]string{"store", "--token-file", filepath.Join(dir, "none")}, "--token-file"},
		{[]string{"bench", "allreduce", "--nproc", "0"}, "--nproc"},
		{[]string{"bench", "broadcast", "--sizes", "1,x"}, "--sizes"},
		{[]string{"bench", "allgather", "--sizes", "-4"}, "--sizes"},
		{[]string{"bench", "allreduce", "--algo", "bogus"}, "--algo"},
		{[]string{"bench", "gemm", "--threads", "0"}, "--threads"},
		{[]string{"bench", "gemm", "--min-time", "0s"}, "--min-time"},
		{[]string{"bench", "gemm", "--precision", "fp16"}, "--precision"},
		{[]string{"bench", "train", "--nproc", "1"}, "--nproc"},
		{[]string{"bench", "train", "--rounds", "0"}, "--rounds"},
		{[]string{"bench", "train", "--", "--nproc-per-node", "3"}, "--nproc-per-node"},
		{[]string{"bench", "train", "--", "--epochs", "0"}, "--epochs"},
		{run("--nproc-per-node", "0"), "--nproc-per-node"},
		{run("--nproc-per-node", "gpu"), "--nproc-per-node"},
		{run("--nnodes", "1:4"), "--nnodes"},
		{run("--nnodes", "2", "--standalone"), "--nnodes"},
		{run("--node-rank", "1"), "--node-rank"},
		{run("--master-addr", "a b"), "--master-addr"},
		{run("--master-port", "70000"), "--master-port"},
		{run("--max-restarts", "-1"), "--max-restarts"},
		{run("--monitor-interval", "0"), "--monitor-interval"},
		{run("--stop-timeout", "soon"), "--stop-timeout"},
		{run("--log-dir", file), "--log-dir"},
		{run("--log-format", "xml"), "--log-format"},
		{run("--tee", "3"), "--tee"},
		{run("--redirects", "4", "--log-dir", dir), "--redirects"},
		{run("--redirects", "0:1,2:3", "--nproc-per-node", "2", "--log-dir", dir), "--redirects"},
		{run("--local-ranks-filter", "1"), "--local-ranks-filter"},
		{run("--local-ranks-filter", "x", "--nproc-per-node", "2"), "--local-ranks-filter"},
		{run("--nproc-per-node", "two"), "--nproc-per-node"},
		{train("--nproc-per-node", "0"), "--nproc-per-node"},
		{train("--max-restarts", "1"), "--max-restarts"},
		{train("--log-dir", dir), "--log-dir"},
		{train("--tee", "1"), "--tee"},
		{train("--log-format", "yaml"), "--log-format"},
		{train("--model", "resnet"), "--model"},
		{train("--epochs", "0"), "--epochs"},
		{train("--epochs", "-1"), "--epochs"},
		{train("--epochs", "many"), "--epochs"},
		{train("--batch-size", "0"), "--batch-size"},
		{train("--lr", "0"), "--lr"},
		{train("--lr", "-1"), "--lr"},
		{train("--lr", "NaN"), "--lr"},
		{train("--lr", "fast"), "--lr"},
		{train("--optimizer", "lbfgs"), "--optimizer"},
		{train("--momentum", "-0.5"), "--momentum"},
		{train("--momentum", "0.5", "--optimizer", "adam"), "--momentum"},
		{train("--gamma", "Inf"), "--gamma"},
		{train("--seed", "-1"), "--seed"},
		{train("--data", filepath.Join(dir, "none")), "--data"},
		{train("--data", emptyDir), "--data"},
		{train("--data", file), "--data"},
		{train("--save", noDir), "--save"},
		{train("--save", dir), "--save"},
		{train("--resume"), "--resume"},
		{train("--save-every", "10"), "--save-every"},
		{train("--save-every", "0", "--save", filepath.Join(dir, "m")), "--save-every"},
		{train("--max-steps", "0"), "--max-steps"},
		{train("--lr-scaling", "sqrt"), "--lr-scaling"},
		{train("--comm-hook", "gzip"), "--comm-hook"},
		{train("--precision", "fp16"), "--precision"},
		{train("--precision", "BF16"), "--precision"},
		{train("--progress=maybe"), "--progress"},
		{train("--no-such-flag"), "--no-such-flag"},
		{train("--epochs"), "--epochs"},
		{train("--profile=often"), "--profile"},
		{train("--nproc-per-node", "2", "--log-dir", file), "--log-dir"},
		{train("--nproc-per-node", "2", "--log-dir", dir, "--redirects", "5"), "--redirects"},
		{train("--nproc-per-node", "2", "--log-dir", dir, "--tee", "0:3,0:1"), "--tee"},
		{train("--nproc-per-node", "2", "--local-ranks-filter", "2"), "--local-ranks-filter"},
		{run("--standalone=maybe"), "--standalone"},
		{[]string{"store", "--addr", ":99999"}, "--addr"},
	}
	if !tensor.BF16Native() {
		// Refused, naming the CPU feature bf16 needs, not silently emulated.
		cases = append(cases, struct {
			args []string
			want string
		}{train("--precision", "bf16"), "AVX512_BF16"})
	}
	// The same refusals with two workers: still one line, from the
	// launching process.
	for _, tc := range cases {
		if len(tc.args) > 1 && tc.args[0] == "train" && tc.args[1] == "mnist" && !strings.Contains(strings.Join(tc.args, " "), "nproc-per-node") {
			cases = append(cases, struct {
				args []string
				want string
			}{append(train("--nproc-per-node", "2"), tc.args[2:]...), tc.want})
		}
	}
	for _, tc := range cases {
		if tc.want == "--log-dir" && tc.args[0] == "train" && strings.Contains(strings.Join(tc.args, " "), "nproc-per-node 2") {
			continue // a log directory is right with two workers
		}
		if tc.want == "--max-restarts" && tc.args[0] == "train" && strings.Contains(strings.Join(tc.args, " "), "nproc-per-node 2") {
			tc.args = train("--nproc-per-node", "2", "--max-restarts", "-1") // a count is wrong for two workers too
		}
		all, _, code := runGotrain(t, 30*time.Second, tc.args...)
		out := strings.TrimSuffix(all, "\n")
		switch {
		case code != 2:
			t.Errorf("gotrain %s: exit code %d, want 2; output:\n%s", strings.Join(tc.args, " "), code, all)
		case strings.Contains(out, "\n") || out == "":
			t.Errorf("gotrain %s: want one line, got:\n%s", strings.Join(tc.args, " "), all)
		case !strings.HasPrefix(out, "gotrain: ") || !strings.Contains(out, tc.want):
			t.Errorf("gotrain %s: %q does not name %s", strings.Join(tc.args, " "), out, tc.want)
		case strings.Contains(out, "panic") || strings.Contains(out, "goroutine"):
			t.Errorf("gotrain %s: %q", strings.Join(tc.args, " "), out)
		}
	}
}

// TestBadFlagNamesValue: the line names the value given and what is
// allowed, in the documented form.
func TestBadFlagNamesValue(t *testing.T) {
	for args, want := range map[string]string{
		"train mnist --epochs 0":                       "gotrain: --epochs 0: must be at least 1\n",
		"train mnist --lr -1 --nproc-per-node 2":       "gotrain: --lr -1: must be a number greater than 0\n",
		"train mnist --model resnet":                   "gotrain: --model resnet: must be mlp, cnn or cnn-bn\n",
		"train mnist --model cnn --sync-bn":            "gotrain: --sync-bn: the cnn model has no BatchNorm layer (use --model cnn-bn)\n",
		"train mnist --batch-size x":                   "gotrain: --batch-size x: must be an integer\n",
		"train mnist --optimizer sgdw --lr 0.1":        "gotrain: --optimizer sgdw: must be sgd, adadelta, adam or adamw\n",
		"train cifar10":                                `gotrain: train: unknown command "cifar10" (want gpt, images or mnist; see gotrain train --help)` + "\n",
		"run --nproc-per-node 2 --tee 1 true":          "gotrain: --tee 1: needs --log-dir, where the streams are written\n",
		"bench allreduce --nproc 2 --sizes 8 --algo x": "gotrain: --algo x: must be auto, ring, recursive-doubling, shm or hierarchical\n",
	} {
		all, _, code := runGotrain(t, 30*time.Second, strings.Fields(args)...)
		if code != 2 || all != want {
			t.Errorf("gotrain %s: exit %d, %q; want 2, %q", args, code, all, want)
		}
	}
}

// TestTrainAdamW: --optimizer adamw trains.
func TestTrainAdamW(t *testing.T) {
	all, stdout, code := runGotrain(t, 60*time.Second, "train", "mnist", "--optimizer", "adamw", "--max-steps", "30", "--progress=false")
	if code != 0 {
		t.Fatalf("exit code %d; output:\n%s", code, all)
	}
	if acc := num(t, summary(t, stdout), "test_acc"); acc < 0.5 {
		t.Fatalf("test accuracy %v after 30 AdamW steps; want well above chance", acc)
	}
}

// logPackageLine matches a line of the standard log package's format.
var logPackageLine = regexp.MustCompile(`(^|\]: )\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} `)

// TestLogFormatJSON: with --log-format json, two workers and the launcher
// write only JSON records, besides the summary: the launcher moves a
// worker's rank from the line's prefix into the record, so every record
// of a worker carries its rank and every line is JSON.
func TestLogFormatJSON(t *testing.T) {
	// A bad thread count makes the kernels warn at start-up, before main
	// runs: that record too must be JSON.
	t.Setenv("GOTRAIN_NUM_THREADS", "bad")
	save := filepath.Join(t.TempDir(), "m.safetensors")
	// --resume with no checkpoint yet makes every rank log a record.
	all, _, code := runGotrain(t, 60*time.Second, "train", "mnist", "--nproc-per-node", "2", "--log-format", "json",
		"--max-steps", "5", "--progress=false", "--save", save, "--resume")
	if code != 0 {
		t.Fatalf("exit code %d; output:\n%s", code, all)
	}
	lines := strings.Split(strings.TrimSpace(all), "\n")
	launcherRecords, workerRecords := 0, map[string]int{}
	for _, l := range lines {
		if strings.HasPrefix(l, "model=") {
			// stdout (the summary) and stderr arrive through two pipes, so
			// the summary need not come last here.
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Errorf("not a JSON record: %q: %v", l, err)
			continue
		}
		rank, ok := rec["rank"].(float64)
		if !ok {
			launcherRecords++
			continue
		}
		r := strconv.Itoa(int(rank))
		workerRecords[r]++
		if rec["msg"] == "kernels: ignoring invalid thread count" {
			workerRecords["kernels"]++
		}
	}
	if workerRecords["kernels"] != 2 {
		t.Errorf("%d JSON warnings of the kernels, want one per worker; output:\n%s", workerRecords["kernels"], all)
	}
	if launcherRecords == 0 || workerRecords["0"] == 0 || workerRecords["1"] == 0 {
		t.Fatalf("%d launcher records and worker records %v; want some of each; output:\n%s", launcherRecords, workerRecords, all)
	}
}

// TestLogFormatText: the default text records carry the rank on the
// workers' records, and no line is in the log package's format.
func TestLogFormatText(t *testing.T) {
	t.Setenv("GOTRAIN_NUM_THREADS", "bad")
	save := filepath.Join(t.TempDir(), "m.safetensors")
	all, _, code := runGotrain(t, 60*time.Second, "train", "mnist", "--nproc-per-node", "2",
		"--max-steps", "5", "--progress=false", "--save", save, "--resume")
	if code != 0 {
		t.Fatalf("exit code %d; output:\n%s", code, all)
	}
	for _, l := range strings.Split(all, "\n") {
		if logPackageLine.MatchString(l) || strings.HasPrefix(l, "{") {
			t.Errorf("not a text record: %q", l)
		}
	}
	for _, r := range []string{"0", "1"} {
		if len(linesWith(all, "[rank"+r+"]: time=", "level=WARN", "kernels:", "rank="+r)) != 1 {
			t.Errorf("no text warning of the kernels from rank %s; output:\n%s", r, all)
		}
		if len(linesWith(all, "[rank"+r+"]: time=", "level=INFO", "rank="+r)) == 0 {
			t.Errorf("no text record with rank=%s from rank %s; output:\n%s", r, r, all)
		}
	}
}

// TestRunRedirectsTeeFilter: torchrun's output flags on gotrain run.
func TestRunRedirectsTeeFilter(t *testing.T) {
	logDir := t.TempDir()
	script := `echo out $LOCAL_RANK; echo err $LOCAL_RANK >&2`
	all, stdout, code := runGotrain(t, 30*time.Second, "run", "--nproc-per-node", "2", "--log-dir", logDir,
		"--redirects", "1", "--tee", "0:2", "--local-ranks-filter", "1", "--", "sh", "-c", script)
	if code != 0 {
		t.Fatalf("exit code %d; output:\n%s", code, all)
	}
	// stdout is redirected for both ranks, and the console shows rank 1 only.
	if strings.Contains(stdout, "[rank") {
		t.Errorf("redirected stdout reached the console:\n%s", stdout)
	}
	if !strings.Contains(all, "[rank1]: err 1\n") || strings.Contains(all, "[rank0]:") {
		t.Errorf("console shows other than rank 1's stderr:\n%s", all)
	}
	roots, _ := filepath.Glob(filepath.Join(logDir, "*_*"))
	if len(roots) != 1 {
		t.Fatalf("log dir holds %v", roots)
	}
	for path, want := range map[string]string{
		"0/stdout.log": "out 0\n", "1/stdout.log": "out 1\n",
		"0/stderr.log": "err 0\n", // teed
		"1/stderr.log": "",        // neither redirected nor teed: no file
	} {
		b, err := os.ReadFile(filepath.Join(roots[0], "attempt_0", path))
		if want == "" {
			if err == nil {
				t.Errorf("%s exists, want none", path)
			}
			continue
		}
		if string(b) != want {
			t.Errorf("%s: %q, %v; want %q", path, b, err, want)
		}
	}
}

// TestRunRootCause: a failed worker is reported in one block naming its
// rank, host, exit status and last stderr lines, and with --log-format
// json as one record.
func TestRunRootCause(t *testing.T) {
	host, _ := os.Hostname()
	script := `if [ "$RANK" = 1 ]; then echo first >&2; echo boom >&2; exit 3; fi; sleep 20`
	all, _, code := runGotrain(t, 30*time.Second, "run", "--nproc-per-node", "2", "--", "sh", "-c", script)
	if code != 3 {
		t.Fatalf("exit code %d, want the worker's 3; output:\n%s", code, all)
	}
	block := "launch: job failed; root cause: rank 1 (local rank 1) on " + host
	i := strings.Index(all, block)
	if i < 0 || !strings.Contains(all[i:], "exit status 3") || !strings.Contains(all[i:], "last 2 lines of its stderr:\n    first\n    boom\n") {
		t.Fatalf("no root-cause block; output:\n%s", all)
	}
	if strings.Contains(all, "level=ERROR") || strings.Contains(all, "level=WARN") {
		t.Errorf("generic failure records besides the block:\n%s", all)
	}

	all, _, code = runGotrain(t, 30*time.Second, "run", "--log-format", "json", "--nproc-per-node", "2", "--", "sh", "-c", script)
	if code != 3 {
		t.Fatalf("json: exit code %d; output:\n%s", code, all)
	}
	var found bool
	for _, l := range strings.Split(strings.TrimSpace(all), "\n") {
		if strings.HasPrefix(l, "[rank") {
			continue
		}
		var rec struct {
			Msg        string   `json:"msg"`
			Rank       int      `json:"rank"`
			Host       string   `json:"host"`
			ExitCode   int      `json:"exit_code"`
			StderrTail []string `json:"stderr_tail"`
		}
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("json: launcher line %q: %v", l, err)
		}
		if rec.Msg == "launch: job failed" {
			found = rec.Rank == 1 && rec.Host == host && rec.ExitCode == 3 && strings.Join(rec.StderrTail, ",") == "first,boom"
			if !found {
				t.Errorf("json: root cause record %q", l)
			}
		}
	}
	if !found {
		t.Errorf("json: no root cause record; output:\n%s", all)
	}
}
