package fanout

import (
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotrain/gotrain/launch"
)

// The gang's decisions, driven without processes.

// at is s seconds into an attempt, as the launcher heard it.
func at(s int) time.Time { return time.Unix(1000+int64(s), 0) }

func TestGangFirstFailureStopsTheOthers(t *testing.T) {
	g := newGang([]string{"a", "b", "c"})
	f := &launch.Failure{Rank: 3, Host: "b", ExitCode: 7}
	if stop := g.failed(1, f, at(0)); !slices.Equal(stop, []int{0, 2}) {
		t.Fatalf("failed(b) stops %v, want [0 2]", stop)
	}
	// c's workers then fail too (a lost peer): no new root cause.
	if stop := g.failed(2, &launch.Failure{Rank: 5, ExitCode: 1}, at(1)); stop != nil {
		t.Errorf("second failure stops %v", stop)
	}
	g.exited(0, 143, nil, true, "", at(0))
	g.exited(2, 1, &launch.Failure{Rank: 5, ExitCode: 1}, false, "", at(1))
	if g.done() {
		t.Fatal("done before b reported")
	}
	final := &launch.Failure{Rank: 3, Host: "b", ExitCode: 7, Stderr: []string{"all of it"}}
	g.exited(1, 7, final, false, "", at(0))
	ok, code, restartable := g.verdict()
	if got := g.failure(); !g.done() || ok || code != 7 || !restartable || got.Rank != 3 || !slices.Equal(got.Stderr, final.Stderr) {
		t.Errorf("verdict %v %d %v, failure %+v; want 7, restartable, b's final report", ok, code, restartable, g.failure())
	}
}

func TestGangSuccessAndExitWait(t *testing.T) {
	g := newGang([]string{"a", "b"})
	g.exited(0, 0, nil, false, "", at(0))
	if !g.needExitWait() {
		t.Fatal("a finished while b runs: the exit-wait clock should run")
	}
	g.exited(1, 0, nil, false, "", at(0))
	if ok, code, _ := g.verdict(); !ok || code != 0 || g.needExitWait() {
		t.Errorf("verdict %v %d, want success", ok, code)
	}

	g = newGang([]string{"a", "b"})
	g.exited(0, 0, nil, false, "", at(0))
	if stop := g.exitWaitOver(time.Second); !slices.Equal(stop, []int{1}) {
		t.Fatalf("exit-wait over stops %v, want [1]", stop)
	}
	g.exited(1, 143, nil, true, "", at(0))
	if ok, code, restartable := g.verdict(); ok || code != 1 || restartable {
		t.Errorf("verdict %v %d %v, want a failure with code 1, no restart", ok, code, restartable)
	}
	if want := "other nodes finished, but node 1 (b) still ran after --exit-wait 1s"; g.rootErr != want {
		t.Errorf("reason %q, want %q", g.rootErr, want)
	}
}

func TestGangLostNodeIsNotRestarted(t *testing.T) {
	g := newGang([]string{"a", "b"})
	if stop := g.lostNode(1, "host b: gone", at(0)); !slices.Equal(stop, []int{0}) {
		t.Fatalf("lost b stops %v", stop)
	}
	g.exited(0, 143, nil, true, "", at(0))
	if ok, code, restartable := g.verdict(); ok || code != 1 || restartable {
		t.Errorf("verdict %v %d %v, want code 1 without restart", ok, code, restartable)
	}
}

func TestGangInterrupt(t *testing.T) {
	g := newGang([]string{"a", "b"})
	if stop := g.interrupt(syscall.SIGINT); !slices.Equal(stop, []int{0, 1}) {
		t.Fatalf("interrupt stops %v", stop)
	}
	g.exited(0, 130, nil, true, "", at(0))
	g.exited(1, 130, nil, true, "", at(0))
	if ok, code, restartable := g.verdict(); ok || code != 130 || restartable {
		t.Errorf("verdict %v %d %v, want 130", ok, code, restartable)
	}
}

func TestGangNodeThatCouldNotStart(t *testing.T) {
	g := newGang([]string{"a", "b"})
	if stop := g.exited(1, 1, nil, false, "program not found", at(0)); !slices.Equal(stop, []int{0}) {
		t.Fatalf("b's error stops %v", stop)
	}
	g.exited(0, 143, nil, true, "", at(0))
	if ok, code, restartable := g.verdict(); ok || code != 1 || restartable || g.rootErr != "program not found" {
		t.Errorf("verdict %v %d (%q)", ok, code, g.rootErr)
	}
}

// A node whose worker failed because of a rank on another node reports
// first: the gang waits (graceDue) and the other node's own failure,
// heard later, is the root cause.
func TestGangSecondaryReportedFirst(t *testing.T) {
	g := newGang([]string{"a", "b"})
	g.offsets, g.workers = []int{0, 2}, []int{2, 2}
	peer := &launch.Failure{Rank: 0, Host: "a", ExitCode: 86, Secondary: true, Blames: true, BlameRank: 3}
	if stop := g.failed(0, peer, at(0)); stop != nil || !g.graceDue {
		t.Fatalf("secondary failure stops %v (grace due %v); want no stop yet, a grace period", stop, g.graceDue)
	}
	own := &launch.Failure{Rank: 3, Host: "b", ExitCode: 1, Stderr: []string{"no space left on device"}}
	if stop := g.failed(1, own, at(1)); !slices.Equal(stop, []int{0}) {
		t.Fatalf("primary failure stops %v, want [0]", stop)
	}
	g.exited(0, 86, &launch.Failure{Rank: 0, Host: "a", ExitCode: 86, Secondary: true, Blames: true, BlameRank: 3,
		BlamedBy: nil, Stderr: []string{"failed because of rank 3"}}, false, "", at(2))
	g.exited(1, 1, own, false, "", at(3))
	ok, code, restartable := g.verdict()
	f := g.failure()
	if ok || code != 1 || !restartable || f.Rank != 3 || f.Host != "b" || !slices.Equal(f.BlamedBy, []int{0}) {
		t.Errorf("verdict %v %d %v, root cause %+v; want rank 3 on b, exit 1, blamed by rank 0", ok, code, restartable, f)
	}
}

// Every failure is secondary and they blame a rank on a node the
// launcher stopped after the grace period: that rank is the root cause,
// gone silent, on its node.
func TestGangBlamedRankWentSilent(t *testing.T) {
	g := newGang([]string{"a", "b"})
	g.offsets, g.workers = []int{0, 1}, []int{1, 1}
	peer := &launch.Failure{Rank: 0, Host: "a", ExitCode: 86, Secondary: true, Blames: true, BlameRank: 1, Silence: 14 * time.Second}
	g.failed(0, peer, at(0))
	g.exited(0, 86, peer, false, "", at(1))
	if stop := g.graceOver(); !slices.Equal(stop, []int{1}) {
		t.Fatalf("grace over stops %v, want [1]", stop)
	}
	g.exited(1, 143, nil, true, "", at(2))
	f := g.failure()
	if ok, _, _ := g.verdict(); ok || f == nil || f.Rank != 1 || f.Host != "b" || !f.Silent || f.Cause() != "went silent (no heartbeat for 14s)" {
		t.Fatalf("verdict ok=%v, root cause %+v (%q); want rank 1 on b gone silent, no heartbeat for 14s", ok, f, causeOf(f))
	}
}

// A node cut off from the others: the workers elsewhere fail because of
// its rank first, then the node's agent is lost. The lost node is the
// root cause, naming its host and ranks, whatever was heard first.
func TestGangLinkCutNodeIsRootCause(t *testing.T) {
	g := newGang([]string{"h0", "h1"})
	g.offsets, g.workers = []int{0, 2}, []int{2, 2}
	for r := range 2 {
		g.failed(0, &launch.Failure{Rank: r, Host: "h0", ExitCode: 86, Secondary: true, Blames: true, BlameRank: 2}, at(r))
	}
	// Node 0's own root cause: rank 2, which its ranks blamed, went silent.
	inferred := &launch.Failure{Rank: 2, LocalRank: -1, ExitCode: 86, Secondary: true, Silent: true, BlamedBy: []int{0, 1}}
	if stop := g.exited(0, 86, inferred, false, "", at(2)); stop != nil || !g.graceDue {
		t.Fatalf("node 0's secondary end stops %v (grace due %v); want a grace period", stop, g.graceDue)
	}
	g.lostNode(1, "host h1: the agent sent nothing for 5s", at(3))
	f := g.failure()
	want := "node 1 (host h1, ranks 2-3) unreachable: host h1: the agent sent nothing for 5s"
	if ok, code, restartable := g.verdict(); ok || code != 1 || restartable || f == nil || f.Rank != -1 || f.Cause() != want {
		t.Fatalf("verdict %v %d %v, root cause %q; want %q, no restart", ok, code, restartable, causeOf(f), want)
	}
	if !slices.Equal(f.BlamedBy, []int{0, 1}) {
		t.Errorf("blamed by %v, want [0 1] (node 0's report)", f.BlamedBy)
	}
	if s := f.String(); !strings.HasPrefix(s, "launch: job failed; root cause: "+want+"\n") {
		t.Errorf("report:\n%s", s)
	}
}

func causeOf(f *launch.Failure) string {
	if f == nil {
		return "<none>"
	}
	return f.Cause()
}
