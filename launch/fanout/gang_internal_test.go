package fanout

import (
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/gotrain/gotrain/launch"
)

// The gang's decisions, driven without processes.

func TestGangFirstFailureStopsTheOthers(t *testing.T) {
	g := newGang([]string{"a", "b", "c"})
	f := &launch.Failure{Rank: 3, Host: "b", ExitCode: 7}
	if stop := g.failed(1, f); !slices.Equal(stop, []int{0, 2}) {
		t.Fatalf("failed(b) stops %v, want [0 2]", stop)
	}
	// c's workers then fail too (a lost peer): no new root cause.
	if stop := g.failed(2, &launch.Failure{Rank: 5, ExitCode: 1}); stop != nil {
		t.Errorf("second failure stops %v", stop)
	}
	g.exited(0, 143, nil, true, "")
	g.exited(2, 1, &launch.Failure{Rank: 5, ExitCode: 1}, false, "")
	if g.done() {
		t.Fatal("done before b reported")
	}
	final := &launch.Failure{Rank: 3, Host: "b", ExitCode: 7, Stderr: []string{"all of it"}}
	g.exited(1, 7, final, false, "")
	ok, code, restartable := g.verdict()
	if !g.done() || ok || code != 7 || !restartable || g.failure() != final {
		t.Errorf("verdict %v %d %v, failure %+v; want 7, restartable, b's final report", ok, code, restartable, g.failure())
	}
}

func TestGangSuccessAndExitWait(t *testing.T) {
	g := newGang([]string{"a", "b"})
	g.exited(0, 0, nil, false, "")
	if !g.needExitWait() {
		t.Fatal("a finished while b runs: the exit-wait clock should run")
	}
	g.exited(1, 0, nil, false, "")
	if ok, code, _ := g.verdict(); !ok || code != 0 || g.needExitWait() {
		t.Errorf("verdict %v %d, want success", ok, code)
	}

	g = newGang([]string{"a", "b"})
	g.exited(0, 0, nil, false, "")
	if stop := g.exitWaitOver(time.Second); !slices.Equal(stop, []int{1}) {
		t.Fatalf("exit-wait over stops %v, want [1]", stop)
	}
	g.exited(1, 143, nil, true, "")
	if ok, code, restartable := g.verdict(); ok || code != 1 || restartable {
		t.Errorf("verdict %v %d %v, want a failure with code 1, no restart", ok, code, restartable)
	}
	if want := "other nodes finished, but node 1 (b) still ran after --exit-wait 1s"; g.rootErr != want {
		t.Errorf("reason %q, want %q", g.rootErr, want)
	}
}

func TestGangLostNodeIsNotRestarted(t *testing.T) {
	g := newGang([]string{"a", "b"})
	if stop := g.lostNode(1, "host b: gone"); !slices.Equal(stop, []int{0}) {
		t.Fatalf("lost b stops %v", stop)
	}
	g.exited(0, 143, nil, true, "")
	if ok, code, restartable := g.verdict(); ok || code != 1 || restartable {
		t.Errorf("verdict %v %d %v, want code 1 without restart", ok, code, restartable)
	}
}

func TestGangInterrupt(t *testing.T) {
	g := newGang([]string{"a", "b"})
	if stop := g.interrupt(syscall.SIGINT); !slices.Equal(stop, []int{0, 1}) {
		t.Fatalf("interrupt stops %v", stop)
	}
	g.exited(0, 130, nil, true, "")
	g.exited(1, 130, nil, true, "")
	if ok, code, restartable := g.verdict(); ok || code != 130 || restartable {
		t.Errorf("verdict %v %d %v, want 130", ok, code, restartable)
	}
}

func TestGangNodeThatCouldNotStart(t *testing.T) {
	g := newGang([]string{"a", "b"})
	if stop := g.exited(1, 1, nil, false, "program not found"); !slices.Equal(stop, []int{0}) {
		t.Fatalf("b's error stops %v", stop)
	}
	g.exited(0, 143, nil, true, "")
	if ok, code, restartable := g.verdict(); ok || code != 1 || restartable || g.rootErr != "program not found" {
		t.Errorf("verdict %v %d (%q)", ok, code, g.rootErr)
	}
}
