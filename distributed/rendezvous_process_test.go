package distributed

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testproc"
)

func init() {
	// join: Init with the environment's settings (GOTRAIN_CONNECT_TIMEOUT
	// bounds it), then leave.
	workers["join"] = func() int {
		g, err := Init(context.Background(), Config{})
		if err != nil {
			fmt.Println("init error:", err)
			return 2
		}
		fmt.Println("joined")
		g.Destroy()
		return 0
	}
}

// TestJoinAndLeaveAtOnce: ranks that destroy the group as soon as Init
// returns all succeed. Rank 0 serves the store, so its Init must not
// return before every rank has done with the store in its own set-up (the
// shared-memory arena's agreement reads it last).
func TestJoinAndLeaveAtOnce(t *testing.T) {
	for i := range 4 {
		ranks := testproc.Start(t, "join", 3, testproc.Options{
			Env: []string{"GOTRAIN_TOKEN=proc-test", fmt.Sprintf("GOTRAIN_RUN_ID=%s-%d", t.Name(), i), "GOTRAIN_CONNECT_TIMEOUT=30s"},
		})
		ranks.WaitOK()
	}
}

// TestRendezvousMistakes: a setup mistake on one rank fails every rank,
// the master included, within 2 s of the first failure, each naming the
// reason, rather than leaving the others to the connect timeout.
func TestRendezvousMistakes(t *testing.T) {
	const n, culprit = 3, 2
	for _, tc := range []struct {
		name string
		env  []string // the culprit's
		want string   // in every rank's error
	}{
		{"token", []string{"GOTRAIN_TOKEN=wrong"}, "GOTRAIN_TOKEN differs"},
		{"world-size", []string{"WORLD_SIZE=4", "LOCAL_WORLD_SIZE=4"}, "world size disagreement"},
		{"duplicate-rank", []string{"RANK=1", "LOCAL_RANK=1"}, "duplicate rank"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ranks := testproc.Start(t, "join", n, testproc.Options{
				Env: []string{"GOTRAIN_TOKEN=proc-test", "GOTRAIN_RUN_ID=" + t.Name(), "GOTRAIN_CONNECT_TIMEOUT=30s"},
				RankEnv: func(r int) []string {
					if r == culprit {
						return tc.env
					}
					return nil
				},
			})
			checkAllFail(t, ranks, tc.want)
		})
	}
}

// checkAllFail waits for every rank's init error and checks that each
// names want and that the last came within 2 s of the first.
func checkAllFail(t *testing.T, ranks *testproc.Ranks, want string) {
	t.Helper()
	var first, last time.Time
	for _, p := range ranks.Procs() {
		l, ok := p.WaitLine("init error:", 40*time.Second)
		if !ok {
			t.Fatalf("rank %d did not fail", p.Rank)
		}
		if !strings.Contains(l.Text, want) {
			t.Errorf("rank %d's error does not say %q: %s", p.Rank, want, l.Text)
		}
		if first.IsZero() || l.At.Before(first) {
			first = l.At
		}
		if l.At.After(last) {
			last = l.At
		}
		t.Logf("rank %d: %s", p.Rank, l.Text)
	}
	ranks.Wait()
	t.Logf("last rank failed %v after the first", last.Sub(first).Round(time.Millisecond))
	if d := last.Sub(first); d > 2*time.Second {
		t.Errorf("the last rank failed %v after the first, want ≤ 2 s", d)
	}
	for _, p := range ranks.Procs() {
		if err := p.Err(); err == nil || !strings.Contains(err.Error(), "exit status "+strconv.Itoa(2)) {
			t.Errorf("rank %d exited with %v, want status 2", p.Rank, err)
		}
	}
}
