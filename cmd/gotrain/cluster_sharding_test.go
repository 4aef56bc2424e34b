package main

import (
	"bufio"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/testing/clustertest"
)

// TestClusterHybridSharding: `gotrain run --hosts a:2,b:2 … train gpt
// --sharding hybrid` shards each parameter within a host's two workers
// and reduces across the hosts. Its node groups are the hosts the
// launcher put the ranks on (ranks 0 and 1 on the first host, 2 and 3 on
// the second: GROUP_RANK), its summary names the strategy, and every
// rank's loss at every step is DDP's (`--sharding none`, the same job on
// the same hosts) to 5 significant digits.
func TestClusterHybridSharding(t *testing.T) {
	c := newCluster(t, 2, clustertest.Options{})
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const steps = 5
	run := func(sharding string) (all string, losses map[[2]int]float64) {
		t.Helper()
		metrics := filepath.Join(t.TempDir(), "m.jsonl")
		args := append([]string{"run", "--hosts", hostList(c, 2), "--metrics", metrics}, c.SSHFlags()...)
		args = append(args, exe, "train", "gpt", "--sharding", sharding, "--max-steps", strconv.Itoa(steps),
			"--n-layer", "2", "--n-head", "2", "--n-embd", "32", "--block-size", "32", "--batch-size", "4",
			// A large step from the first: a gradient reduced wrongly
			// shows in the next step's loss.
			"--lr", "0.01", "--warmup-steps", "0",
			"--eval-every", strconv.Itoa(steps), "--eval-batches", "2", "--progress=false")
		all, _, code := runGotrain(t, 120*time.Second, args...)
		if code != 0 {
			t.Fatalf("--sharding %s: exit code %d:\n%s", sharding, code, all)
		}
		return all, stepLosses(t, metrics, all)
	}
	hybrid, hl := run("hybrid")
	ddp, dl := run("none")

	if want := regexp.MustCompile(`msg="harness: hybrid sharding" .*nodes="\[0 1\] \[2 3\]" shard_group=2 replicas=2`); !want.MatchString(hybrid) {
		t.Errorf("the hybrid run's output does not match %s:\n%s", want, hybrid)
	}
	for _, l := range strings.Split(hybrid, "\n") {
		if strings.Contains(l, "harness: hybrid sharding") && strings.Contains(l, "level=WARN") {
			t.Errorf("the node groups disagree with the launcher's: %s", l)
		}
	}
	for name, tc := range map[string]struct {
		all, want string
	}{"hybrid": {hybrid, "sharding=hybrid"}, "none": {ddp, ""}} {
		line := lastRank0Line(tc.all)
		if !strings.Contains(line, "model=gpt world=4 steps="+strconv.Itoa(steps)) {
			t.Errorf("--sharding %s: summary %q, want model=gpt world=4 steps=%d", name, line, steps)
		}
		if tc.want != "" && !strings.Contains(line, tc.want) {
			t.Errorf("--sharding %s: summary %q does not name the strategy (%s)", name, line, tc.want)
		}
		if tc.want == "" && strings.Contains(line, "sharding=") {
			t.Errorf("--sharding %s: summary %q names a strategy", name, line)
		}
	}
	for r := range 4 {
		for s := 1; s <= steps; s++ {
			k := [2]int{r, s}
			h, okh := hl[k]
			d, okd := dl[k]
			if !okh || !okd {
				t.Fatalf("rank %d step %d: a loss in the hybrid run: %v, in DDP's: %v", r, s, okh, okd)
			}
			if math.Abs(h-d) > 1e-5*math.Abs(d) {
				t.Errorf("rank %d step %d: hybrid's loss %.7g, DDP's %.7g: they differ in the first 5 significant digits", r, s, h, d)
			}
		}
	}
}

// stepLosses reads a --metrics file of one-step rows: the loss of each
// (rank, step). all is the run's output, for failures.
func stepLosses(t *testing.T, path, all string) map[[2]int]float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("the launcher wrote no metrics: %v\n%s", err, all)
	}
	defer f.Close()
	out := map[[2]int]float64{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var row struct {
			Rank, Step, Steps int
			Loss              *float64
		}
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			t.Fatalf("%s: %q: %v", path, sc.Text(), err)
		}
		if row.Steps != 1 || row.Loss == nil {
			continue // not a training step's row
		}
		out[[2]int{row.Rank, row.Step}] = *row.Loss
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
