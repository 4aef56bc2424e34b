package launch_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotrain/gotrain/launch"
)

func TestRestartDelay(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		base, limit time.Duration
		n           int
		want        time.Duration
	}{
		{s, 30 * s, 1, s}, {s, 30 * s, 2, 2 * s}, {s, 30 * s, 3, 4 * s}, {s, 30 * s, 5, 16 * s},
		{s, 30 * s, 6, 30 * s}, {s, 30 * s, 1000, 30 * s},
		{10 * time.Millisecond, time.Second, 4, 80 * time.Millisecond},
		{0, 30 * s, 3, 0}, {-1, 30 * s, 3, 0}, {s, 30 * s, 0, 0},
	} {
		if got := launch.RestartDelay(tc.base, tc.limit, tc.n); got != tc.want {
			t.Errorf("RestartDelay(%v, %v, %d) = %v, want %v", tc.base, tc.limit, tc.n, got, tc.want)
		}
	}
}

// TestRestartBackoffLogged: each restart waits its delay, logged with
// the restart's number.
func TestRestartBackoffLogged(t *testing.T) {
	j := newJob(t, 1, "exit:5", nil)
	j.cfg.MaxRestarts, j.cfg.RestartBackoff = 3, 20*time.Millisecond
	start := time.Now()
	code, err := j.run(t, context.Background())
	if code != 5 || err != nil {
		t.Fatalf("Run = %d, %v; want 5, nil", code, err)
	}
	if el := time.Since(start); el < 140*time.Millisecond {
		t.Errorf("three restarts took %v, less than their waits 20+40+80ms", el)
	}
	got := regexp.MustCompile(`restarting workers in (\S+) \(restart (\d) of 3\)`).FindAllStringSubmatch(j.log.String(), -1)
	want := [][2]string{{"20ms", "1"}, {"40ms", "2"}, {"80ms", "3"}}
	if len(got) != len(want) {
		t.Fatalf("restarts logged %q, want %v:\n%s", got, want, j.log.String())
	}
	for i, w := range want {
		if got[i][1] != w[0] || got[i][2] != w[1] {
			t.Errorf("restart %d logged %q, want %v", i+1, got[i][0], w)
		}
	}
}

// TestRestartBackoffInterrupted: a signal during the wait before a
// restart ends the job at once, with no further start.
func TestRestartBackoffInterrupted(t *testing.T) {
	j := newJob(t, 1, "exit:5", nil)
	j.cfg.MaxRestarts, j.cfg.RestartBackoff, j.cfg.MaxRestartBackoff = 3, time.Hour, 2*time.Hour
	ctx, cancel := context.WithCancelCause(context.Background())
	starts := 0
	launch.BeforeStart(t, func(int) {
		starts++
		if starts == 2 {
			t.Error("a second attempt started")
		}
	})
	waiting := &watchWriter{want: "restarting workers in 1h0m0s (restart 1 of 3)", seen: make(chan struct{})}
	j.cfg.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(&j.log, waiting), nil))
	done := make(chan struct{})
	var code int
	var err error
	go func() {
		defer close(done)
		code, err = j.run(t, ctx)
	}()
	select {
	case <-waiting.seen: // the launcher waits for an hour now
	case <-done:
		t.Fatalf("Run returned %d, %v before the wait", code, err)
	}
	cancel(&launch.SignalError{Signal: syscall.SIGINT})
	<-done
	if code != 128+int(syscall.SIGINT) || !errors.Is(err, launch.ErrInterrupted) {
		t.Errorf("Run = %d, %v; want 130 and ErrInterrupted", code, err)
	}
}

// TestInterruptStopsStarting: a signal while workers start stops the
// starting at once; the started ones are stopped.
func TestInterruptStopsStarting(t *testing.T) {
	j := newJob(t, 6, "sleep", nil)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	var tried []int
	launch.BeforeStart(t, func(local int) {
		tried = append(tried, local)
		if local == 2 {
			cancel(&launch.SignalError{Signal: syscall.SIGTERM})
		}
	})
	code, err := j.run(t, ctx)
	if code != 128+int(syscall.SIGTERM) || !errors.Is(err, launch.ErrInterrupted) {
		t.Fatalf("Run = %d, %v; want 143 and ErrInterrupted", code, err)
	}
	if len(tried) != 3 {
		t.Errorf("start loop reached local ranks %v, want it to stop at 2", tried)
	}
	if !strings.Contains(j.log.String(), "interrupted while starting workers") || !strings.Contains(j.log.String(), "started=2") {
		t.Errorf("launcher log:\n%s", j.log.String())
	}
}

// watchWriter closes seen once a write holds want.
type watchWriter struct {
	want string
	seen chan struct{}
	done bool // only the launcher's goroutine writes
}

func (w *watchWriter) Write(p []byte) (int, error) {
	if !w.done && strings.Contains(string(p), w.want) {
		w.done = true
		close(w.seen)
	}
	return len(p), nil
}
