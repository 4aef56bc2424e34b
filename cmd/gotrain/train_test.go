package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/internal/testlog"
)

// The resume test trains one whole epoch at batch 256 per rank (quicker
// than 64): stepsPerEpoch2 is ⌈30 000/256⌉ steps for each of 2 ranks.
const (
	resumeBatch    = "256"
	stepsPerEpoch2 = 118
)

func TestTrainMNIST(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		world string
	}{
		{"single-process", nil, "1"},
		{"two-workers", []string{"--nproc-per-node", "2"}, "2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"train", "mnist", "--max-steps", "30", "--progress=false"}, tc.args...)
			all, stdout, code := runGotrain(t, 60*time.Second, args...)
			if code != 0 {
				t.Fatalf("exit code %d; output:\n%s", code, all)
			}
			kv := summary(t, stdout)
			if kv["model"] != "mlp" || kv["world"] != tc.world || kv["steps"] != "30" || kv["epochs"] != "1" {
				t.Fatalf("summary %v: want model=mlp world=%s steps=30 epochs=1", kv, tc.world)
			}
			// Rank 0's summary reaches this process as an event, printed
			// once, last and unprefixed, whatever the number of workers.
			if lines := linesWith(stdout, "model="); len(lines) != 1 || !strings.HasPrefix(lines[0], "model=") {
				t.Fatalf("summary lines %q: want one, unprefixed; stdout:\n%s", lines, stdout)
			}
			// 30 SGD steps take the MLP from chance (0.1) to about 0.77.
			if acc := num(t, kv, "test_acc"); acc < 0.5 || acc > 1 {
				t.Fatalf("test_acc=%v after 30 steps; want well above chance", acc)
			}
			if sps := num(t, kv, "samples_per_s"); sps <= 0 {
				t.Fatalf("samples_per_s=%v", sps)
			}
			if rss := num(t, kv, "peak_rss_mib"); rss <= 0 {
				t.Fatalf("peak_rss_mib=%v", rss)
			}
		})
	}
}

func TestTrainMNISTProfile(t *testing.T) {
	all, stdout, code := runGotrain(t, 60*time.Second,
		"train", "mnist", "--nproc-per-node", "2", "--max-steps", "20", "--progress=false", "--profile")
	if code != 0 {
		t.Fatalf("exit code %d; output:\n%s", code, all)
	}
	prof := linesWith(all, "[rank0]: profile per step:")
	if len(prof) != 1 {
		t.Fatalf("want one profile line from rank 0; output:\n%s", all)
	}
	for _, key := range []string{"data_ms", "forward_ms", "backward_ms", "exposed_allreduce_wait_ms", "optimizer_ms"} {
		m := regexp.MustCompile(key + `=([0-9.]+)`).FindStringSubmatch(prof[0])
		if m == nil {
			t.Fatalf("profile line %q lacks %s", prof[0], key)
		}
	}
	if kv := summary(t, stdout); kv["world"] != "2" {
		t.Fatalf("summary %v: want world=2", kv)
	}
}

func TestRunPrefixesEachRank(t *testing.T) {
	all, stdout, code := runGotrain(t, 30*time.Second, "run", "--nproc-per-node", "2", "--", "sh", "-c", "echo $RANK of $WORLD_SIZE")
	if code != 0 {
		t.Fatalf("exit code %d; output:\n%s", code, all)
	}
	for _, want := range []string{"[rank0]: 0 of 2", "[rank1]: 1 of 2"} {
		if len(linesWith(stdout, want)) != 1 {
			t.Errorf("stdout lacks the line %q:\n%s", want, stdout)
		}
	}
}

// A worker SIGKILLed mid-training under --max-restarts 1: the launcher
// restarts both, they resume from rank 0's last checkpoint and finish the
// epoch from where it left off, ending with exactly the weights of a run
// that was never interrupted.
func TestTrainResumesAfterWorkerKilled(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ref := filepath.Join(dir, "ref.safetensors")
	if all, _, code := runGotrain(t, 60*time.Second, "train", "mnist", "--nproc-per-node", "2", "--batch-size", resumeBatch, "--progress=false", "--save", ref); code != 0 {
		t.Fatalf("uninterrupted run: exit code %d; output:\n%s", code, all)
	}

	save := filepath.Join(dir, "m.safetensors")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// `gotrain run` restarts; each worker is `gotrain train mnist`, which
	// joins the launcher's group through the environment. --standalone
	// takes a free port: 29500 may be another job's.
	cmd := gotrainCmd(ctx, t, "run", "--standalone", "--nproc-per-node", "2", "--max-restarts", "1", self,
		"train", "mnist", "--batch-size", resumeBatch, "--progress=false", "--save", save, "--save-every", "10", "--resume")
	var all, stdout testlog.Buffer
	cmd.Stdout, cmd.Stderr = io.MultiWriter(&all, &stdout), &all
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFile(t, checkpoint.TrainingPath(save), 30*time.Second, &all)
	pid := workerPID(t, cmd.Process.Pid, 1, 10*time.Second)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("killing rank 1 (pid %d): %v", pid, err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("job did not complete after the restart: %v; output:\n%s", err, all.String())
	}
	out := all.String()
	if len(linesWith(out, "restarting workers")) == 0 {
		t.Fatalf("no restart logged; output:\n%s", out)
	}
	stepRE := regexp.MustCompile(`\bstep=(\d+)`)
	resumedAt := map[string]int{}
	for _, l := range linesWith(out, "resumed", "checkpoint=") {
		m := stepRE.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("resume line %q has no step", l)
		}
		resumedAt[l[:strings.Index(l, "]")+1]], _ = strconv.Atoi(m[1])
	}
	r0, ok0 := resumedAt["[rank0]"]
	r1, ok1 := resumedAt["[rank1]"]
	if !ok0 || !ok1 || r0 != r1 || r0 <= 0 || r0 >= stepsPerEpoch2 {
		t.Fatalf("want both ranks resumed at the same step in (0, %d); got %v; output:\n%s", stepsPerEpoch2, resumedAt, out)
	}
	kv := summary(t, stdout.String())
	t.Logf("rank 1 killed after the first checkpoint; both ranks resumed at step %d; %s", r0, strings.TrimSpace(stdout.String()))
	if kv["world"] != "2" || kv["epochs"] != "1" {
		t.Fatalf("summary %v: want world=2 epochs=1", kv)
	}
	// The restarted run trained only the rest of the epoch.
	if steps := int(num(t, kv, "steps")); steps+r0 != stepsPerEpoch2 {
		t.Fatalf("resumed at step %d and ran %d steps; want %d in all", r0, steps, stepsPerEpoch2)
	}
	if acc := num(t, kv, "test_acc"); acc < 0.85 {
		t.Fatalf("test_acc=%v after one epoch; want ≥ 0.85", acc)
	}
	// Weights, momentum and the place in the data all came back exactly,
	// and every step is deterministic, so the two runs end bit for bit alike.
	want, err := os.ReadFile(ref)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(save)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the resumed run's model %s differs from the uninterrupted run's %s", save, ref)
	}
}

// A worker SIGKILLed with no restarts left: the launcher stops the other
// and exits with the dead worker's code at once, and the survivor, if it
// reports before being stopped, names the dead rank.
func TestTrainWorkerKilledStopsTheOthers(t *testing.T) {
	save := filepath.Join(t.TempDir(), "m.safetensors")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := gotrainCmd(ctx, t, "train", "mnist", "--nproc-per-node", "2", "--epochs", "3",
		"--progress=false", "--save", save, "--save-every", "10")
	var all testlog.Buffer
	cmd.Stdout, cmd.Stderr = &all, &all
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The first checkpoint shows that training is under way.
	waitFile(t, checkpoint.TrainingPath(save), 30*time.Second, &all)
	survivor := workerPID(t, cmd.Process.Pid, 0, 10*time.Second)
	pid := workerPID(t, cmd.Process.Pid, 1, 10*time.Second)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("killing rank 1 (pid %d): %v", pid, err)
	}
	killed := time.Now()
	err := cmd.Wait()
	took := time.Since(killed)
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("gotrain exited with %v after its worker was killed; want a non-zero exit; output:\n%s", err, all.String())
	}
	if took > 5*time.Second {
		t.Errorf("gotrain took %v to exit after rank 1 was killed; want < 5s", took)
	}
	if code := ee.ExitCode(); code != 128+int(syscall.SIGKILL) {
		t.Errorf("exit code %d; want the killed worker's %d", code, 128+int(syscall.SIGKILL))
	}
	out := all.String()
	if len(linesWith(out, "root cause: rank 1 (local rank 1)", "SIGKILL")) != 1 {
		t.Errorf("launcher did not report rank 1 as failed; output:\n%s", out)
	}
	for _, l := range linesWith(out, "[rank0]:", "peer") {
		if !strings.Contains(l, "rank 1") {
			t.Errorf("rank 0's error %q does not name the dead rank 1", l)
		}
	}
	if parentPID(survivor) == cmd.Process.Pid {
		t.Errorf("rank 0 (pid %d) still running after gotrain exited", survivor)
	}
}

// The user's program of examples/mnist, built as a user builds it, under
// `gotrain run`.
func TestExampleMNISTUnderRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds examples/mnist")
	}
	goTool, err := exec.LookPath("go") // go test puts its own go first in PATH
	if err != nil {
		t.Skipf("no go command to build the example: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "mnist-example")
	build := exec.Command(goTool, "build", "-o", bin, "../../examples/mnist")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./examples/mnist: %v\n%s", err, out)
	}
	all, stdout, code := runGotrain(t, 60*time.Second, "run", "--standalone", "--nproc-per-node", "2", bin, "--max-steps", "30")
	if code != 0 {
		t.Fatalf("exit code %d; output:\n%s", code, all)
	}
	kv := summary(t, stdout)
	if kv["model"] != "mlp" || kv["world"] != "2" || kv["epochs"] != "1" {
		t.Fatalf("summary %v: want model=mlp world=2 epochs=1", kv)
	}
	if acc := num(t, kv, "test_acc"); acc < 0.5 || acc > 1 {
		t.Fatalf("test_acc=%v after 30 steps; want well above chance", acc)
	}
	// Only rank 0 reports.
	if n := len(linesWith(stdout, "model=")); n != 1 {
		t.Fatalf("%d summary lines; want rank 0's only:\n%s", n, stdout)
	}
}

// TestTrainMomentumZero: --momentum 0 trains without momentum. The job's
// zero value means its 0.9 default, so the flag's 0 must be passed on as
// "none": its weights differ from 0.9's, while leaving the flag out gives
// 0.9's exactly.
func TestTrainMomentumZero(t *testing.T) {
	dir := t.TempDir()
	weights := func(name string, extra ...string) []byte {
		path := filepath.Join(dir, name+".safetensors")
		args := append([]string{"train", "mnist", "--max-steps", "5", "--progress=false", "--save", path}, extra...)
		all, _, code := runGotrain(t, 60*time.Second, args...)
		if code != 0 {
			t.Fatalf("%v: exit code %d; output:\n%s", args, code, all)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	none, fixed, dflt := weights("none", "--momentum", "0"), weights("fixed", "--momentum", "0.9"), weights("default")
	if bytes.Equal(none, fixed) {
		t.Error("--momentum 0 gave the weights of --momentum 0.9")
	}
	if !bytes.Equal(dflt, fixed) {
		t.Error("no --momentum gave other weights than --momentum 0.9")
	}
}
