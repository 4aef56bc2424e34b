package main

import (
	"bytes"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/jobs/gptjob"
	"github.com/gotrain/gotrain/jobs/mnistjob"
	"github.com/gotrain/gotrain/launch/machine"
)

// small is a machine of 2 CPUs, 4 GiB available, 1024 open files and
// no shared memory.
var small = machine.Resources{CPUs: 2, MemAvailable: 4 << 30, MemSource: "test", NoFile: 1024}

func TestSizeCheck(t *testing.T) {
	gptBig := gptjob.Config{NEmbd: 100000, NHead: 1}.MemoryEstimate()
	mnistDefault := mnistjob.Config{}.MemoryEstimate()
	for _, tc := range []struct {
		name string
		s    sizeCheck
		r    machine.Resources
		want string // "" for no refusal
	}{
		{"fits", sizeCheck{nproc: 4, nprocFlag: "4", world: 4, mesh: true, memory: mnistDefault}, small, ""},
		{"more workers than 8 per CPU", sizeCheck{nproc: 17, nprocFlag: "17", world: 17}, small,
			"--nproc-per-node 17: more than 16 local workers (8 per CPU, 2 CPUs here)"},
		{"at least 8 workers on one CPU", sizeCheck{nproc: 8, nprocFlag: "8", world: 8}, machine.Resources{CPUs: 1}, ""},
		{"launcher's open files", sizeCheck{nproc: 100, nprocFlag: "100", world: 100}, machine.Resources{CPUs: 64, NoFile: 512},
			"--nproc-per-node 100: the launcher needs 864 open files for 100 workers (pipes and log files) and may open 512 (ulimit -n)"},
		{"workers' connections", sizeCheck{nproc: 2, nprocFlag: "2", world: 1000, mesh: true}, machine.Resources{NoFile: 512},
			"--nproc-per-node 2: each worker needs 1064 open files for its connections to the other 999 ranks and may open 512"},
		{"any program's workers in memory", sizeCheck{nproc: 16, nprocFlag: "16", world: 16}, machine.Resources{CPUs: 2, MemAvailable: 100 << 20, MemSource: "test"},
			"--nproc-per-node 16: 16 workers need about 256 MiB of memory (16 MiB each: a worker of any program is counted for 16 MiB) and 100 MiB is available (test)"},
		{"a job's size flag", sizeCheck{nproc: 1, nprocFlag: "1", world: 1, mesh: true, memory: gptBig}, small,
			"--n-embd 100000: needs about 10.6 TiB of memory (4.8e+11 parameters ×6 copies 10.5 TiB"},
		{"the count when one worker fits", sizeCheck{nproc: 16, nprocFlag: "16", world: 16, mesh: true, memory: mnistDefault},
			machine.Resources{CPUs: 2, MemAvailable: 1 << 30, MemSource: "test"}, "--nproc-per-node 16: 16 workers need about"},
		{"shared memory counts", sizeCheck{nproc: 8, nprocFlag: "8", world: 8, memory: mnistDefault},
			machine.Resources{CPUs: 2, MemAvailable: 2 << 30, MemSource: "test", ShmFree: 1 << 30}, "; shared memory "},
		{"unknown readings", sizeCheck{nproc: 1000, nprocFlag: "1000", world: 1000, memory: gptBig}, machine.Resources{}, ""},
	} {
		err := tc.s.check(tc.r)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		case err != nil && !isUsage(err):
			t.Errorf("%s: %v is not a usage error", tc.name, err)
		}
	}
}

// TestSizeCheckForce: --force turns the refusal into a warning line.
func TestSizeCheckForce(t *testing.T) {
	s := sizeCheck{nproc: 17, nprocFlag: "17", world: 17}
	var log bytes.Buffer
	l := slog.New(slog.NewTextHandler(&log, nil))
	if err := checkSizesOn(s, false, small, l); err == nil || !strings.HasSuffix(err.Error(), "(--force starts anyway)") || log.Len() != 0 {
		t.Errorf("without --force: %v, log %q", err, log.String())
	}
	if err := checkSizesOn(s, true, small, l); err != nil {
		t.Errorf("with --force: %v", err)
	}
	if got := log.String(); strings.Count(got, "\n") != 1 || !strings.Contains(got, "level=WARN") || !strings.Contains(got, "starting anyway (--force): --nproc-per-node 17") {
		t.Errorf("with --force, log %q", got)
	}
}

// TestSizesRefusedBeforeStart: sizes no machine holds are refused with
// one line naming the flag, exit status 2, before any worker starts.
func TestSizesRefusedBeforeStart(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"train", "mnist", "--nproc-per-node", "100000"}, "gotrain: --nproc-per-node 100000: more than "},
		{[]string{"run", "--nproc-per-node", "100000", "true"}, "gotrain: --nproc-per-node 100000: more than "},
		{[]string{"train", "mnist", "--batch-size", "100000000"}, "gotrain: --batch-size 100000000: needs about "},
		{[]string{"train", "mnist", "--nproc-per-node", "2", "--batch-size", "100000000"}, "gotrain: --batch-size 100000000: 2 workers need about "},
		{[]string{"train", "gpt", "--n-embd", "100000", "--n-head", "1"}, "gotrain: --n-embd 100000: needs about "},
		{[]string{"train", "gpt", "--n-layer", "1000000"}, "gotrain: --n-layer 1000000: needs about "},
		{[]string{"train", "gpt", "--block-size", "100000000"}, "gotrain: --block-size 100000000: the shipped Go corpus"},
	} {
		all, _, code := runGotrain(t, 30*time.Second, tc.args...)
		if code != 2 || strings.Count(all, "\n") != 1 || !strings.HasPrefix(all, tc.want) || !strings.Contains(all, "available") && !strings.Contains(all, "CPU") && !strings.Contains(all, "corpus") {
			t.Errorf("gotrain %s: exit %d, output:\n%s\nwant one line starting %q", strings.Join(tc.args, " "), code, all, tc.want)
		}
	}
}

// TestErrorsNameTypedFlag: a refusal names the flag the user typed, with
// an example that fits it.
func TestErrorsNameTypedFlag(t *testing.T) {
	dir := t.TempDir()
	short := dir + "/short.txt"
	if err := os.WriteFile(short, []byte(strings.Repeat("func main() {}\n", 100)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"train", "gpt", "--block-size", "5000", "--data", short}, "gotrain: --block-size 5000: " + short + " (1500 bytes) is too short"},
		{[]string{"train", "mnist", "--metrics", dir}, "gotrain: --metrics " + dir + ": is a directory; want a file path such as " + dir + "/metrics.jsonl"},
		{[]string{"train", "gpt", "--trace", dir}, "gotrain: --trace " + dir + ": is a directory; want a file path such as " + dir + "/trace.json"},
		{[]string{"train", "mnist", "--nproc-per-node", "2", "--restart-backoff", "-1s"}, "gotrain: --restart-backoff -1s: must be a duration of at least 0"},
	} {
		all, _, code := runGotrain(t, 30*time.Second, tc.args...)
		if code != 2 || strings.Count(all, "\n") != 1 || !strings.HasPrefix(all, tc.want) {
			t.Errorf("gotrain %s: exit %d, output:\n%s\nwant one line starting %q", strings.Join(tc.args, " "), code, all, tc.want)
		}
	}
}
