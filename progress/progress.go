// Package progress reports a training loop's progress: a bar per epoch
// (or per evaluation interval) with the loss, samples/s (or tokens/s),
// the step of the run's total and the ETA of the whole run, and a line at
// the end of each epoch or interval with its mean training loss and
// metrics.
//
// Under `gotrain run` (or `gotrain train`), the launcher owns the terminal:
// it gives each worker a pipe whose descriptor is in GOTRAIN_EVENTS_FD, and
// the reporter writes structured events (JSON lines, see Event) to it
// instead of drawing anything; the launcher renders one display for all
// ranks, with the slowest rank's step time, and prints the workers' output
// above it. Started any other way the reporter of rank 0 renders the
// display itself: a live bar on a terminal, plain lines otherwise (one
// every LogEvery and one per epoch end, no carriage returns); other ranks
// stay quiet. No line is wider than the terminal (80 columns when it
// cannot say).
//
// A loop reports like this:
//
//	rep := progress.FromEnv()
//	defer rep.Close()
//	rep.Steps(0, epochs*loader.Len()) // the run's steps: step k/n and the ETA
//	for epoch := range epochs {
//		bar := rep.Epoch(epoch, epochs, loader.Len())
//		for batch := range loader.Batches() {
//			// ... forward, backward, step
//			bar.Step(len(batch.Y), progress.Loss(float64(loss.Item())))
//		}
//		bar.Done(progress.Metric("test_acc", evaluate()))
//	}
//
// A rate leaves out each bar's first step, whose time holds the start-up
// or the data fetched after an evaluation: no rate is shown before a
// bar's second step. Lines written to rep.Writer() print above the bar
// without tearing it. A program on package harness reports through it
// (harness.Run.Train, or harness.Reporter for a loop of its own), which
// also records the metrics rows: one call a step.
package progress

import (
	"encoding/json"
	"io"
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

// Clock sets the reporter's clock (default time.Now), for tests.
func Clock(now func() time.Time) Option { return func(r *Reporter) { r.now = now } }

// Reporter sends a process's progress to the launcher, or renders it.
// Its methods are safe for concurrent use; a Bar is for one goroutine.
type Reporter struct {
	out      io.Writer
	rank     int
	logEvery time.Duration
	unit     string
	now      func() time.Time

	mu     sync.Mutex
	events *os.File         // the launcher's pipe, or nil
	cons   *console.Console // the local display, or nil
	lines  io.Writer        // Writer's result
	quiet  bool             // a rank other than 0, alone: report nothing

	// mu guards the run's count too: the steps done and in all, and
	// since when (timedFrom, the end of the first step this reporter
	// saw, at timedStep) the ETA's time per step is measured.
	runStep, runSteps int
	timedFrom         time.Time
	timedStep         int
}

// FromEnv returns the process's reporter: one that writes events to the
// launcher's pipe if GOTRAIN_EVENTS_FD names one (and removes the variable
// from the environment, so no child process writes to a descriptor that is
// not the pipe), or else one that renders on Output.
func FromEnv(opts ...Option) *Reporter {
	r := &Reporter{out: os.Stderr, rank: -1, now: time.Now}
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
	r.cons = console.New(console.Options{Out: r.out, LogEvery: r.logEvery, Now: r.now})
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
		panic("progress: send: " + err.Error()) // cannot fail: event.Event writes NaN and Inf as null
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

// Steps sets the run's place: done steps already taken (by the run a
// resumed one carries on) of total in all (0 if unknown). Every bar's
// Step adds one; the display shows the step of the total and the ETA
// of the whole run.
func (r *Reporter) Steps(done, total int) {
	r.mu.Lock()
	r.runStep, r.runSteps = done, total
	r.timedFrom, r.timedStep = time.Time{}, 0
	r.mu.Unlock()
}

// advance counts one step of the run ended at now and returns the run's
// place and the seconds left: the steps left at the mean wall time per
// step since the end of the first step (so evaluations and checkpoints
// count; the start-up does not). The ETA is 0 until a second step.
func (r *Reporter) advance(now time.Time) (step, steps int, eta float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runStep++
	if r.timedFrom.IsZero() {
		r.timedFrom, r.timedStep = now, r.runStep
	}
	if n := r.runStep - r.timedStep; n > 0 && r.runSteps > r.runStep {
		eta = now.Sub(r.timedFrom).Seconds() / float64(n) * float64(r.runSteps-r.runStep)
	}
	return r.runStep, r.runSteps, eta
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

// Bar is one epoch's (or evaluation interval's) progress.
type Bar struct {
	r                 *Reporter
	ev                event.Event
	start, last, sent time.Time
	sentStep          int
	lossSum           float64
	losses            int
	// The rate's window starts at the end of the first step.
	firstEnd     time.Time
	firstSamples int64
}

// Epoch starts the bar of epoch (counting from 0, as a loop's index;
// shown as epoch+1 of epochs) of steps steps (0 if unknown).
func (r *Reporter) Epoch(epoch, epochs, steps int) *Bar {
	return r.bar(event.Event{Epoch: epoch + 1, Epochs: epochs, Steps: steps, Unit: r.unit})
}

// Interval starts the bar of the k-th evaluation interval (counting from
// 0; shown as "eval k+1/n") of steps steps, for a run that evaluates
// every so many steps rather than at the end of each epoch.
func (r *Reporter) Interval(k, n, steps int) *Bar {
	return r.bar(event.Event{Epoch: k + 1, Epochs: n, Steps: steps, Unit: r.unit, Label: "eval"})
}

func (r *Reporter) bar(ev event.Event) *Bar {
	now := r.now()
	r.mu.Lock()
	ev.RunStep, ev.RunSteps = r.runStep, r.runSteps
	r.mu.Unlock()
	b := &Bar{r: r, start: now, last: now, sent: now, ev: ev}
	start := b.ev
	start.Kind = event.KindEpoch
	r.send(&start)
	return b
}

// Step records one step over n samples (or tokens), with its Loss; the
// display shows the mean loss of the epoch's steps so far.
func (b *Bar) Step(n int, fields ...Field) {
	now := b.r.now()
	b.last = now
	b.ev.Step++
	b.ev.Samples += int64(n)
	if b.ev.Step == 1 {
		b.firstEnd, b.firstSamples = now, b.ev.Samples
	}
	b.ev.RunStep, b.ev.RunSteps, b.ev.ETA = b.r.advance(now)
	for _, f := range fields {
		if f.name == "loss" { // a NaN makes the mean NaN: shown, not hidden
			b.lossSum += f.value
			b.losses++
		}
	}
	if b.ev.Step == 1 || b.ev.Step == b.ev.Steps || now.Sub(b.sent) >= sendEvery {
		b.report(event.KindStep, now)
	}
}

// Done ends the epoch with its fields: Loss for the epoch's training loss
// (else the mean of the steps' losses) and Metrics, shown in the order
// given.
func (b *Bar) Done(fields ...Field) {
	for _, f := range fields {
		if f.name == "loss" {
			b.lossSum, b.losses = f.value, 1
			continue
		}
		if b.ev.Metrics == nil {
			b.ev.Metrics = map[string]float64{}
		}
		if _, ok := b.ev.Metrics[f.name]; !ok {
			b.ev.Names = append(b.ev.Names, f.name)
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
	if window := b.last.Sub(b.firstEnd).Seconds(); ev.Step > 1 && window > 0 {
		ev.Rate = float64(ev.Samples-b.firstSamples) / window
	}
	if b.losses > 0 {
		mean := b.lossSum / float64(b.losses)
		ev.Loss = &mean
	}
	b.sent, b.sentStep = now, ev.Step
	b.r.send(&ev)
}
