package main

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotrain/gotrain/harness"
	"github.com/gotrain/gotrain/internal/testnet"
)

// TestFTDiLoCoSurvivesAKilledWorker: `gotrain run --nproc-per-node 3
// gotrain train mnist --ft --diloco 50` (and --local-sgd 50) with one worker SIGKILLed just
// after an outer step, in the inner steps that follow. The other two are
// never restarted and commit the next outer step; the killed one is
// restarted, heals from a peer at an outer step, and from then on its
// weights equal rank 0's at every outer step; the job ends with a trained
// model and a summary that counts the failure.
// replicaChangeRE matches the display's line for a change of the
// replica of launcher rank 1 (its ID ends in -001).
var replicaChangeRE = regexp.MustCompile(`(?m)^replica \S+-001 (left|healed from \S+): \d/3 replicas at step \d+$`)

func TestFTDiLoCoSurvivesAKilledWorker(t *testing.T) {
	for _, mode := range []string{"diloco", "local-sgd"} {
		t.Run(mode, func(t *testing.T) { testFTOuterStep(t, mode) })
	}
}

func testFTOuterStep(t *testing.T, mode string) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// 10 outer steps: room for the restarted worker to start and rejoin
	// on a busy machine before the job ends.
	const h, steps = 50, 500
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	env := []string{harness.EnvFTTrace + "=1", "GOTRAIN_HEARTBEAT_TIMEOUT=3s"}
	p, out, code := startGotrain(t, ctx, env, "run", "--nproc-per-node", "3", "--max-restarts", "1", "--restart-backoff", "0",
		"--master-port", strconv.Itoa(testnet.FreePort(t)),
		self, "train", "mnist", "--ft", "--"+mode, strconv.Itoa(h), "--epochs", "1000", "--max-steps", strconv.Itoa(steps),
		"--batch-size", "32", "--progress=false")
	var pids [3]int
	for r := range 3 {
		pids[r] = workerPID(t, p.Pid, r, 30*time.Second)
	}
	// Killed as soon as it reports its first outer step: in the inner
	// steps after it.
	if !out.waitFor(2*time.Minute, func(s string) bool { return len(commits(s)[1]) >= 1 }) {
		t.Fatalf("rank 1 committed no outer step within 2 minutes:\n%s", out.String())
	}
	if err := syscall.Kill(pids[1], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	before := len(out.String())
	killedAt := commits(out.String())[1][0].step
	// The survivors commit the next outer step: the order, not a time.
	if !out.waitFor(2*time.Minute, func(s string) bool {
		for _, c := range commits(s)[0] {
			if c.at > before && c.step > killedAt {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("rank 0 committed no outer step after rank 1 was killed:\n%s", out.String())
	}
	for _, r := range []int{0, 2} {
		if err := syscall.Kill(pids[r], 0); err != nil {
			t.Errorf("rank %d (pid %d) is gone after rank 1's death: %v", r, pids[r], err)
		}
	}
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("gotrain run exited %d:\n%s", c, out.String())
		}
	case <-ctx.Done():
		t.Fatalf("the job did not finish:\n%s", out.String())
	}
	s := out.String()
	cs := commits(s)
	ref := map[int]string{}
	for _, c := range cs[0] {
		if c.step%h != 0 && c.step != steps {
			t.Errorf("rank 0 committed an outer step at inner step %d, not a multiple of %d", c.step, h)
		}
		ref[c.step] = c.hash
	}
	for _, r := range []int{0, 2} {
		var got []int
		for _, c := range cs[r] {
			got = append(got, c.step)
		}
		var want []int
		for s := h; s <= steps; s += h {
			want = append(want, s)
		}
		if !slices.Equal(got, want) {
			t.Errorf("rank %d committed outer steps %v, want %v (none lost, none repeated)", r, got, want)
		}
	}
	var rejoined []commit
	for _, c := range cs[1] {
		if c.at > before {
			rejoined = append(rejoined, c)
		}
	}
	if len(rejoined) == 0 {
		t.Fatalf("the restarted rank 1 committed no outer step:\n%s", s)
	}
	for _, c := range rejoined {
		if ref[c.step] != c.hash {
			t.Fatalf("restarted rank 1 at step %d has weights %s, rank 0 %q: it did not heal", c.step, c.hash, ref[c.step])
		}
	}
	t.Logf("rank 1, killed after outer step %d, rejoined at outer step %d with rank 0's weights", killedAt, rejoined[0].step)
	if strings.Contains(s, `restarting a failed worker as a joining replica" rank=0`) || strings.Contains(s, `restarting a failed worker as a joining replica" rank=2`) {
		t.Error("a survivor was restarted")
	}
	var line string
	for l := range strings.Lines(s) {
		if strings.HasPrefix(l, "[rank0]: model=") {
			line = l
		}
	}
	if line == "" {
		t.Fatalf("no summary line:\n%s", s)
	}
	// The launcher's display shows the change: rank 1's replica left, or
	// was restarted before the quorum dropped it and healed.
	if !replicaChangeRE.MatchString(s) {
		t.Errorf("the display shows no line for rank 1's replica leaving or healing:\n%s", s)
	}
	t.Logf("summary: %s", strings.TrimSpace(line))
	kv := summary(t, line)
	sync := strings.ReplaceAll(mode, "-", "") + ":50"
	if kv["failures_survived"] != "1" || num(t, kv, "steps_lost") > 1 || kv["sync"] != sync || num(t, kv, "test_acc") < 0.5 {
		t.Errorf("summary %q: want failures_survived=1, steps_lost<=1, sync=%s and a trained model", strings.TrimSpace(line), sync)
	}
}
