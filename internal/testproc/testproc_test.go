package testproc

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

var workers = Workers{
	"env": func() int {
		for _, k := range []string{"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "EXTRA", "PER_RANK"} {
			fmt.Printf("%s=%s\n", k, os.Getenv(k))
		}
		fmt.Fprintln(os.Stderr, "to stderr")
		fmt.Print("unterminated")
		return 0
	},
	"sleep-or-fail": func() int {
		if os.Getenv("RANK") == "1" {
			fmt.Println("failing")
			return 3
		}
		time.Sleep(time.Minute) // until killed; the minute ends an orphan
		return 0
	},
	"sleep": func() int {
		time.Sleep(time.Minute) // until killed; the minute ends an orphan
		return 0
	},
}

func TestMain(m *testing.M) {
	Dispatch(workers)
	os.Exit(m.Run())
}

// fakeT records the harness's verdict instead of failing the real test.
type fakeT struct {
	testing.TB
	mu    sync.Mutex
	fatal string
}

func (f *fakeT) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatal = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fakeT) Failed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fatal != "" || f.TB.Failed()
}

func (f *fakeT) verdict() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fatal
}

// inGoroutine runs fn as a test body would run, Goexit included, and
// reports whether it returned within limit.
func inGoroutine(fn func(), limit time.Duration) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
		return true
	case <-time.After(limit):
		return false
	}
}

func TestStartEnvironmentAndOutput(t *testing.T) {
	ranks := Start(t, "env", 3, Options{
		Env:     []string{"EXTRA=x", "MASTER_ADDR=127.0.0.2"},
		RankEnv: func(r int) []string { return []string{fmt.Sprintf("PER_RANK=p%d", r)} },
	})
	ranks.WaitOK()
	var port string
	for r, p := range ranks.Procs() {
		got := p.Text()
		for _, want := range []string{
			fmt.Sprintf("RANK=%d\n", r), fmt.Sprintf("LOCAL_RANK=%d\n", r), "WORLD_SIZE=3\n", "LOCAL_WORLD_SIZE=3\n",
			"MASTER_ADDR=127.0.0.2\n", "EXTRA=x\n", fmt.Sprintf("PER_RANK=p%d\n", r), "to stderr\n", "unterminated\n",
		} {
			if !strings.Contains(got, want) {
				t.Errorf("rank %d: output lacks %q:\n%s", r, want, got)
			}
		}
		l, ok := p.WaitLine("MASTER_PORT=", 0)
		if !ok || l.Text == "MASTER_PORT=" || l.At.IsZero() {
			t.Fatalf("rank %d: no MASTER_PORT line: %+v", r, l)
		}
		if port != "" && l.Text != port {
			t.Errorf("rank %d: %s, rank 0 had %s", r, l.Text, port)
		}
		port = l.Text
	}
}

func TestWaitOKKillsTheOthersAtTheFirstFailure(t *testing.T) {
	ft := &fakeT{TB: t}
	var ranks *Ranks
	if !inGoroutine(func() {
		ranks = Start(ft, "sleep-or-fail", 3, Options{})
		ranks.WaitOK()
	}, 20*time.Second) {
		t.Fatal("WaitOK still waiting 20 s after a rank failed")
	}
	if v := ft.verdict(); !strings.HasPrefix(v, "rank 1: exit status 3") {
		t.Fatalf("verdict %q, want rank 1's exit status 3", v)
	}
	for _, p := range ranks.Procs() {
		select {
		case <-p.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("rank %d still running", p.Rank)
		}
	}
	if l, ok := ranks.Procs()[1].WaitLine("failing", 0); !ok || l.Text != "failing" {
		t.Errorf("rank 1's output lost: %q", ranks.Procs()[1].Text())
	}
}

func TestTimeoutKillsAndFails(t *testing.T) {
	ft := &fakeT{TB: t}
	start := time.Now()
	if !inGoroutine(func() { Start(ft, "sleep", 2, Options{Timeout: 300 * time.Millisecond}).Wait() }, 20*time.Second) {
		t.Fatal("Wait still waiting 20 s after the timeout")
	}
	if v := ft.verdict(); !strings.Contains(v, "still running after 300ms") {
		t.Fatalf("verdict %q, want a timeout", v)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the timeout took %v to kill the ranks", d)
	}
}

func TestCommandUnknownWorker(t *testing.T) {
	out, err := Command(context.Background(), t, "no-such-worker").CombinedOutput()
	if err == nil || !strings.Contains(string(out), `"no-such-worker" names no worker`) {
		t.Fatalf("unknown worker: %v, output %q", err, out)
	}
}
