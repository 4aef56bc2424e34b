package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testnet"
	"github.com/gotrain/gotrain/internal/testproc"
)

// workers lets the test binary run the example's main, so each test
// starts real processes without building a binary.
var workers = testproc.Workers{
	"main": func() int {
		main() // exits 1 on failure
		return 0
	},
}

func TestMain(m *testing.M) {
	testproc.Dispatch(workers)
	os.Exit(m.Run())
}

// example is one process of the example with its output.
type example struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
}

// start runs the example with args and extra environment, outside any
// launcher's environment.
func start(ctx context.Context, t *testing.T, env []string, args ...string) *example {
	t.Helper()
	e := &example{cmd: testproc.Command(ctx, t, "main", args...)}
	inherited := e.cmd.Env
	e.cmd.Env = nil
	for _, kv := range inherited {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "GOTRAIN_TOKEN":
		default:
			e.cmd.Env = append(e.cmd.Env, kv)
		}
	}
	e.cmd.Env = append(e.cmd.Env, env...)
	e.cmd.Stdout, e.cmd.Stderr = &e.stdout, &e.stderr
	e.cmd.WaitDelay = 5 * time.Second
	if err := e.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return e
}

// wait waits for the process and fails the test unless it exits 0.
func (e *example) wait(t *testing.T) {
	t.Helper()
	if err := e.cmd.Wait(); err != nil {
		t.Fatalf("%v: %v\nstdout:\n%s\nstderr:\n%s", e.cmd.Args[1:], err, e.stdout.String(), e.stderr.String())
	}
}

// runExample runs the example to completion and returns its stdout.
func runExample(t *testing.T, args ...string) (stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := start(ctx, t, nil, args...)
	e.wait(t)
	return e.stdout.String(), e.stderr.String()
}

// checkSummary checks the summary line of rank 0's stdout.
func checkSummary(t *testing.T, stdout, world string) {
	t.Helper()
	kv := map[string]string{}
	line := strings.TrimSpace(stdout)
	for _, f := range strings.Fields(line) {
		k, v, _ := strings.Cut(f, "=")
		kv[k] = v
	}
	if kv["model"] != "mlp" || kv["world"] != world || kv["epochs"] != "1" || kv["steps"] != "30" || kv["samples_per_s"] == "" {
		t.Fatalf("summary %q: want model=mlp world=%s epochs=1 steps=30 samples_per_s=…", line, world)
	}
	var rss float64
	if _, err := fmt.Sscan(kv["peak_rss_mib"], &rss); err != nil || rss <= 0 {
		t.Fatalf("summary %q: want peak_rss_mib=<MiB>", line)
	}
	var acc float64
	if _, err := fmt.Sscan(kv["test_acc"], &acc); err != nil || acc < 0.5 || acc > 1 {
		t.Fatalf("summary %q: want test_acc well above chance after 30 steps", line)
	}
}

func TestSingleProcess(t *testing.T) {
	stdout, _ := runExample(t, "--max-steps", "30")
	checkSummary(t, stdout, "1")
}

// Two ranks started by hand, as from two shells, meeting through a tcp://
// or file:// rendezvous.
func TestTwoProcesses(t *testing.T) {
	for _, scheme := range []string{"tcp", "file"} {
		t.Run(scheme, func(t *testing.T) {
			var method string
			if scheme == "tcp" {
				method = "tcp://" + testnet.FreeAddr(t)
			} else {
				method = "file://" + filepath.Join(t.TempDir(), "store")
			}
			token := make([]byte, 16)
			rand.Read(token)
			env := []string{"GOTRAIN_TOKEN=" + hex.EncodeToString(token), "GOTRAIN_NUM_THREADS=1"}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var ranks [2]*example
			for r := range ranks {
				ranks[r] = start(ctx, t, env, "--init-method", method, "--rank", fmt.Sprint(r), "--world-size", "2", "--max-steps", "30")
			}
			var wg sync.WaitGroup
			for _, e := range ranks {
				wg.Go(func() { e.cmd.Wait() })
			}
			wg.Wait()
			for r, e := range ranks {
				if !e.cmd.ProcessState.Success() {
					t.Fatalf("rank %d: %v\nstderr:\n%s", r, e.cmd.ProcessState, e.stderr.String())
				}
			}
			checkSummary(t, ranks[0].stdout.String(), "2")
			if out := ranks[1].stdout.String(); out != "" {
				t.Fatalf("rank 1 printed %q; only rank 0 reports", out)
			}
		})
	}
}

// A job stopped after 20 steps and resumed for 20 more ends with exactly
// the model of 40 uninterrupted steps: weights, momentum and the place in
// the data all carried over.
func TestResumeCarriesOn(t *testing.T) {
	dir := t.TempDir()
	straight := filepath.Join(dir, "straight.safetensors")
	runExample(t, "--max-steps", "40", "--save", straight)

	resumed := filepath.Join(dir, "resumed.safetensors")
	_, stderr := runExample(t, "--max-steps", "20", "--save", resumed, "--resume")
	if !strings.Contains(stderr, "no checkpoint yet") {
		t.Fatalf("first run did not start fresh; stderr:\n%s", stderr)
	}
	_, stderr = runExample(t, "--max-steps", "20", "--save", resumed, "--resume")
	if !strings.Contains(stderr, "resumed") || !strings.Contains(stderr, "step=20") {
		t.Fatalf("second run did not resume at step 20; stderr:\n%s", stderr)
	}
	want, err := os.ReadFile(straight)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(resumed)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("20+20 resumed steps differ from 40 straight steps")
	}
}

func TestUnknownModelFails(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := start(ctx, t, nil, "--model", "resnet")
	if err := e.cmd.Wait(); err == nil || e.cmd.ProcessState.ExitCode() != 1 {
		t.Fatalf("exit %v; want 1", err)
	}
	if s := e.stderr.String(); !strings.Contains(s, "resnet") || !strings.Contains(s, "want mlp or cnn") {
		t.Fatalf("stderr does not name the model:\n%s", e.stderr.String())
	}
}

// The flags map onto the harness's settings and the program's own:
// without --init-method it stays "" (so that a lone process without
// WORLD_SIZE trains alone), and --momentum 0 is no momentum.
func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		args              []string
		initMethod, model string
		momentum          float64
		rank, world       int
	}{
		{nil, "", "mlp", 0.9, 0, 0},
		{[]string{"--init-method", "tcp://127.0.0.1:1", "--rank", "1", "--world-size", "2"}, "tcp://127.0.0.1:1", "mlp", 0.9, 1, 2},
		{[]string{"--init-method=env://", "--momentum", "0"}, "env://", "mlp", 0, 0, 0},
		{[]string{"--model", "cnn", "--momentum", "0.5"}, "", "cnn", 0.5, 0, 0},
	} {
		o, err := parseFlags(flag.NewFlagSet("mnist", flag.ContinueOnError), tc.args)
		if err != nil {
			t.Fatalf("parseFlags(%q): %v", tc.args, err)
		}
		if o.run.InitMethod != tc.initMethod || o.model != tc.model || o.momentum != tc.momentum ||
			o.run.Rank != tc.rank || o.run.WorldSize != tc.world || o.run.Summary != os.Stdout {
			t.Errorf("parseFlags(%q) = %+v; want init method %q, model %q, momentum %v, rank %d of %d, the summary on stdout",
				tc.args, o, tc.initMethod, tc.model, tc.momentum, tc.rank, tc.world)
		}
	}
}

// A malformed rank variable fails the example naming it, where a lone
// run would hide that the job was meant to have several ranks.
func TestMalformedEnvFails(t *testing.T) {
	for _, kv := range []string{"WORLD_SIZE=abc", "RANK=x", "LOCAL_WORLD_SIZE=y"} {
		t.Run(kv, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			e := start(ctx, t, []string{"LOCAL_WORLD_SIZE=", kv}, "--max-steps", "1")
			if err := e.cmd.Wait(); err == nil || e.cmd.ProcessState.ExitCode() != 1 {
				t.Fatalf("exit %v; want 1\nstderr:\n%s", err, e.stderr.String())
			}
			name, value, _ := strings.Cut(kv, "=")
			if s := e.stderr.String(); !strings.Contains(s, fmt.Sprintf("environment variable %s=\\\"%s\\\"", name, value)) {
				t.Fatalf("stderr does not name %s:\n%s", name, s)
			}
		})
	}
}
