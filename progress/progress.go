// Package progress reports a training loop's progress: a bar per epoch
// with the loss, samples/s (or tokens/s) and ETA, and a line at the end of
// each epoch with its mean training loss and metrics.
//
// Under `gotrain run` (or `gotrain train`), the launcher owns the terminal:
// it gives each worker a pipe whose descriptor is in GOTRAIN_EVENTS_FD, and
// the reporter writes structured events (JSON lines, see Event) to it
// instead of drawing anything; the launcher renders one display for all
// ranks, with the slowest rank's step time, and prints the workers' output
// above it. Started any other way the reporter of rank 0 renders the
// display itself: a live bar on a terminal, plain lines otherwise (one
// every LogEvery and one per epoch end, no carriage returns); other ranks
// stay quiet.
//
// A loop reports like this:
//
//	rep := progress.FromEnv()
//	defer rep.Close()
//	for epoch := range epochs {
//		bar := rep.Epoch(epoch, epochs, loader.Len())
//		for batch := range loader.Batches() {
//			// ... forward, backward, step
//			bar.Step(len(batch.Y), progress.Loss(float64(loss.Item())))
//		}
//		bar.Done(progress.Metric("test_acc", evaluate()))
//	}
//
// Lines written to rep.Writer() print above the bar without tearing it.
package progress

import (
	"encoding/json"
	"io"
	"math"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/gotrain/gotrain/event"
	"github.com/gotrain/gotrain/progress/console"
)

// sendEvery is the most often a bar reports steps: the display needs no
// more, and a fast loop must not spend its time writing events.
const sendEvery = 100 * time.Millisecond

// Option configures FromEnv.
type Option func(*Reporter)

// Output is where a reporter not under a launcher renders, and what
// Writer returns under one (default os.Stderr).
func Output(w io.Writer) Option { return func(r *Reporter) { r.out = w } }

// Rank sets the reporting rank (default: the RANK environment variable,
// or 0). Not under a launcher, only rank 0 renders.
func Rank(rank int) Option { return func(r *Reporter) { r.rank = rank } }

// LogEvery is the period of the plain lines a reporter not under a
// launcher writes when its output is not a terminal (default 10 s).
func LogEvery(d time.Duration) Option { return func(r *Reporter) { r.logEvery = d } }

// Tokens counts tokens instead of samples (tokens/s on the display).
func Tokens() Option { return func(r *Reporter) { r.unit = "tokens" } }

// Reporter sends a process's progress to the launcher, or renders it.
// Its methods are safe for concurrent use; a Bar is for one goroutine.
type Reporter struct {
	out      io.Writer
	rank     int
	logEvery time.Duration
	unit     string

	mu     sync.Mutex
	events *os.File         // the launcher's pipe, or nil
	cons   *console.Console // the local display, or nil
	lines  io.Writer        // Writer's result
	quiet  bool             // a rank other than 0, alone: report nothing
}

// FromEnv returns the process's reporter: one that writes events to the
// launcher's pipe if GOTRAIN_EVENTS_FD names one (and removes the variable
// from the environment, so no child process writes to a descriptor that is
// not the pipe), or else one that renders on Output.
func FromEnv(opts ...Option) *Reporter {
	r := &Reporter{out: os.Stderr, rank: -1}
	for _, o := range opts {
		o(r)
	}
	if r.rank < 0 {
		r.rank, _ = strconv.Atoi(os.Getenv("RANK"))
	}
	r.lines = r.out
	if f := eventsPipe(); f != nil {
		r.events = f
		return r
	}
	if r.rank != 0 {
		r.quiet = true
		return r
	}
	r.cons = console.New(console.Options{Out: r.out, LogEvery: r.logEvery})
	r.lines = r.cons.Writer()
	return r
}

// eventsPipe opens the pipe GOTRAIN_EVENTS_FD names, if it names a pipe.
func eventsPipe() *os.File {
	s, ok := os.LookupEnv(event.EnvFD)
	if !ok {
		return nil
	}
	_ = os.Unsetenv(event.EnvFD)
	fd, err := strconv.Atoi(s)
	if err != nil || fd < 3 {
		return nil
	}
	if !isPipe(fd) {
		return nil // not ours to write or close: a stale variable
	}
	closeOnExec(fd)
	return os.NewFile(uintptr(fd), "gotrain-events")
}

// Writer returns where the program's own output lines go so that they
// print above the display: the local display's writer, or the Output
// itself under a launcher (whose console does the same).
func (r *Reporter) Writer() io.Writer { return r.lines }

// Close ends the reporting: it closes the pipe, or leaves the local
// display's last state on screen.
func (r *Reporter) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.events != nil:
		err := r.events.Close()
		r.events = nil
		return err
	case r.cons != nil:
		r.cons.Close()
	}
	return nil
}

// send reports ev.
func (r *Reporter) send(ev *event.Event) {
	if r.quiet {
		return
	}
	ev.Rank = r.rank
	line, err := json.Marshal(ev)
	if err != nil {
		panic("progress: send: " + err.Error()) // only float NaN/Inf could fail; send filters them
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.events != nil:
		if _, err := r.events.Write(append(line, '\n')); err != nil {
			// The launcher is gone; the job carries on without a display.
			r.events.Close()
			r.events, r.quiet = nil, true
		}
	case r.cons != nil:
		r.cons.Event(r.rank, line)
	}
}

// Field is a value reported with a step or at an epoch's end.
type Field struct {
	name  string
	value float64
}

// Loss is a step's loss; at Done, the epoch's mean training loss (by
// default Done reports the mean of the steps' losses).
func Loss(v float64) Field { return Field{"loss", v} }

// Metric is a named value reported at an epoch's end, as test accuracy.
func Metric(name string, v float64) Field { return Field{name, v} }

// Bar is one epoch's progress.
type Bar struct {
	r                 *Reporter
	ev                event.Event
	start, last, sent time.Time
	sentStep          int
	lossSum           float64
	losses            int
}

// Epoch starts the bar of epoch (counting from 0, as a loop's index;
// shown as epoch+1 of epochs) of steps steps (0 if unknown).
func (r *Reporter) Epoch(epoch, epochs, steps int) *Bar {
	now := time.Now()
	b := &Bar{r: r, start: now, last: now, sent: now,
		ev: event.Event{Epoch: epoch + 1, Epochs: epochs, Steps: steps, Unit: r.unit}}
	ev := b.ev
	ev.Kind = event.KindEpoch
	r.send(&ev)
	return b
}

// Step records one step over n samples (or tokens), with its Loss; the
// display shows the mean loss of the epoch's steps so far.
func (b *Bar) Step(n int, fields ...Field) {
	now := time.Now()
	b.last = now
	b.ev.Step++
	b.ev.Samples += int64(n)
	for _, f := range fields {
		if f.name == "loss" && finite(f.value) {
			b.lossSum += f.value
			b.losses++
		}
	}
	if b.ev.Step == 1 || b.ev.Step == b.ev.Steps || now.Sub(b.sent) >= sendEvery {
		b.report(event.KindStep, now)
	}
}

// Done ends the epoch with its fields: Loss for the epoch's training loss
// (else the mean of the steps' losses) and Metrics.
func (b *Bar) Done(fields ...Field) {
	for _, f := range fields {
		if !finite(f.value) {
			continue
		}
		if f.name == "loss" {
			b.lossSum, b.losses = f.value, 1
			continue
		}
		if b.ev.Metrics == nil {
			b.ev.Metrics = map[string]float64{}
		}
		b.ev.Metrics[f.name] = f.value
	}
	b.report(event.KindDone, b.last)
}

// report sends the bar's state as of the last step at now.
func (b *Bar) report(kind string, now time.Time) {
	ev := b.ev
	ev.Kind = kind
	ev.Elapsed = b.last.Sub(b.start).Seconds()
	if steps := ev.Step - b.sentStep; steps > 0 {
		ev.StepTime = now.Sub(b.sent).Seconds() / float64(steps)
	} else if ev.Step > 0 {
		ev.StepTime = ev.Elapsed / float64(ev.Step)
	}
	if b.losses > 0 {
		mean := b.lossSum / float64(b.losses)
		ev.Loss = &mean
	}
	b.sent, b.sentStep = now, ev.Step
	b.r.send(&ev)
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
