package metrics

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/gotrain/gotrain/ddp"
	"github.com/gotrain/gotrain/event"
	"github.com/gotrain/gotrain/progress"
)

const tidCompute = event.TIDCompute

// sendSpans is how many spans a tracer under a launcher batches into one
// event (well under the launcher's 64 KiB line limit), and sendPeriod the
// longest it holds them.
const (
	sendSpans  = 150
	sendPeriod = 200 * time.Millisecond
)

// tracer collects a rank's spans: into a file, or in batches to the
// launcher. Its lock is taken by the loop and DDP's comm goroutine.
type tracer struct {
	rank int
	rep  *progress.Reporter // set: send to the launcher
	path string

	mu      sync.Mutex
	pending []event.TraceEvent
	sent    time.Time
	f       *os.File
	w       *bufio.Writer
	n       int // events written to w
	err     error
}

// newTracer makes a tracer that sends to rep, or else writes path. A
// launcher names a rank's tracks itself, and takes its spans as they
// come: each carries the rank as its PID.
func newTracer(rank int, rep *progress.Reporter, path string) *tracer {
	t := &tracer{rank: rank, rep: rep, path: path, sent: time.Now()}
	if rep == nil {
		t.pending = event.TrackNames(rank)
	}
	return t
}

func us(t time.Time) float64 { return float64(t.UnixNano()) / 1e3 }

// span adds a complete span; the caller may hold no lock.
func (t *tracer) span(name string, tid int, start, end time.Time, args map[string]any) {
	t.mu.Lock()
	t.add(name, tid, start, end, args)
	t.mu.Unlock()
}

// add adds a span; t.mu is held.
func (t *tracer) add(name string, tid int, start, end time.Time, args map[string]any) {
	t.pending = append(t.pending, event.TraceEvent{Name: name, Cat: "train", Ph: "X", TS: us(start),
		Dur: float64(end.Sub(start).Nanoseconds()) / 1e3, PID: t.rank, TID: tid, Args: args})
}

// step adds the spans of step n, which ended at end with exposed
// allreduce wait (drawn at the end of backward, where DDP waits).
func (t *tracer) step(s *Step, end time.Time, exposed time.Duration, n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.add("step "+strconv.Itoa(n), event.TIDCompute, s.data, end, nil)
	t.add("data", event.TIDCompute, s.data, s.t0, nil)
	t.add("forward", event.TIDCompute, s.t0, s.fwd, nil)
	t.add("backward", event.TIDCompute, s.fwd, s.bwd, nil)
	if exposed > 0 {
		from := s.bwd.Add(-exposed)
		if from.Before(s.fwd) {
			from = s.fwd
		}
		t.add("exposed allreduce wait", event.TIDCompute, from, s.bwd, nil)
	}
	t.add("optimizer", event.TIDCompute, s.bwd, end, nil)
	if len(t.pending) >= sendSpans || end.Sub(t.sent) >= sendPeriod {
		t.flush(end)
	}
}

// bucket is DDP's observer: one bucket's allreduce.
func (t *tracer) bucket(b ddp.BucketSpan) {
	t.mu.Lock()
	defer t.mu.Unlock()
	name := "allreduce bucket " + strconv.Itoa(b.Bucket)
	args := map[string]any{"bucket": b.Bucket, "bytes": b.Bytes}
	if b.Err != nil {
		args["error"] = b.Err.Error()
	}
	if !b.Queued.IsZero() {
		t.add("queued bucket "+strconv.Itoa(b.Bucket), event.TIDQueue, b.Queued, b.Start, nil)
		args["queued_us"] = float64(b.Start.Sub(b.Queued).Nanoseconds()) / 1e3
	}
	t.add(name, event.TIDAllReduce, b.Start, b.End, args)
}

// flush sends or writes the pending spans; t.mu is held.
func (t *tracer) flush(now time.Time) {
	t.sent = now
	if len(t.pending) == 0 {
		return
	}
	if t.rep != nil {
		for len(t.pending) > 0 {
			n := min(len(t.pending), sendSpans)
			if err := t.rep.Emit(event.KindTrace, t.pending[:n]); err != nil && t.err == nil {
				t.err = err
			}
			t.pending = t.pending[n:]
		}
		t.pending = nil
		return
	}
	if t.f == nil && t.err == nil {
		f, err := os.Create(t.path)
		if err != nil {
			t.err = fmt.Errorf("creating the trace file: %w", err)
		} else {
			t.f, t.w = f, bufio.NewWriterSize(f, 64<<10)
			_, _ = t.w.WriteString("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n")
		}
	}
	if t.w != nil {
		for i := range t.pending {
			b, err := json.Marshal(&t.pending[i])
			if err != nil {
				continue // only a NaN could fail: no span to keep
			}
			if t.n > 0 {
				_ = t.w.WriteByte(',')
			}
			t.n++
			_, _ = t.w.Write(b)
			_ = t.w.WriteByte('\n')
		}
	}
	t.pending = t.pending[:0]
}

// close writes or sends what is left and ends the file.
func (t *tracer) close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.rep == nil && t.f == nil && t.err == nil {
		t.flush(time.Now()) // creates the file even for a run of no steps
	}
	t.flush(time.Now())
	if t.w != nil {
		_, _ = t.w.WriteString("]}\n")
		if err := t.w.Flush(); err != nil && t.err == nil {
			t.err = fmt.Errorf("writing %s: %w", t.path, err)
		}
		if err := t.f.Close(); err != nil && t.err == nil {
			t.err = err
		}
		t.f, t.w = nil, nil
	}
	return t.err
}
