package harness

import (
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/gotrain/gotrain/ddp/ft"
)

// observe reports one change per replica that left, joined or healed,
// with the replicas of the new quorum, and nothing for a retried heal or
// an unchanged quorum.
func TestFTObserveReportsChanges(t *testing.T) {
	q := func(step int64, ids []string, recover ...string) ft.Quorum {
		var ms []ft.Member
		for _, id := range ids {
			ms = append(ms, ft.Member{ID: id})
		}
		src := ""
		if len(recover) > 0 {
			src = "a"
		}
		return ft.Quorum{Members: ms, Recover: recover, Source: src, MaxStep: step}
	}
	f := &ftRun{id: "a", replicas: 3, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	abc := []string{"a", "b", "c"}
	for _, tc := range []struct {
		q    ft.Quorum
		want string
	}{
		{q(0, abc), "[]"},
		{q(5, abc, "b"), "[{healed b 3 3 5 a}]"}, // b was restarted in place
		{q(5, abc, "b"), "[]"},                   // the same heal, retried
		{q(6, abc), "[]"},
		{q(9, []string{"a", "b"}), "[{left c 2 3 9 }]"},
		{q(12, []string{"a", "b", "d"}, "d"), "[{joined d 3 3 12 } {healed d 3 3 12 a}]"},
		{q(20, []string{"a", "d"}), "[{left b 2 3 20 }]"},
	} {
		if got := fmt.Sprint(f.observe(tc.q, false)); got != tc.want {
			t.Errorf("quorum %v at step %d (recover %v): changes %s, want %s", tc.q.IDs(), tc.q.MaxStep, tc.q.Recover, got, tc.want)
		}
	}
	joiner := &ftRun{id: "b", join: true, replicas: 3, log: f.log}
	if got, want := fmt.Sprint(joiner.observe(q(5, abc, "b"), false)), "[{healed b 3 3 5 a}]"; got != want {
		t.Errorf("a joining replica's first quorum: changes %s, want %s", got, want)
	}
}
