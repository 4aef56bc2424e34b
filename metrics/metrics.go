// Package metrics records a training loop's steps: one JSON line per
// step (or per Every steps) per rank with the loss, learning rate,
// samples/s, the step's time split into data, forward, backward, exposed
// allreduce wait and optimizer, and the bytes sent to each peer; and,
// optionally, a timeline of the same phases and of each gradient bucket's
// allreduce as Chrome trace-event JSON (chrome://tracing, Perfetto).
//
// A loop records like this:
//
//	rec, err := metrics.New(metrics.Config{File: "metrics.jsonl", Group: pg, Model: dm, Reporter: rep})
//	if err != nil { return err }
//	defer rec.Close()
//	for epoch := range epochs {
//		rec.StartEpoch(epoch)
//		for batch := range loader.Batches() {
//			st := rec.Begin()       // the data phase ends here
//			loss := nn.CrossEntropy(dm.Forward(batch.X), batch.Y)
//			st.Forwarded()
//			if err := loss.Backward(); err != nil { return err }
//			st.Backwarded()
//			opt.Step()
//			st.End(len(batch.Y), float64(loss.Item()), lr)
//		}
//	}
//
// A number that is not finite (the loss of a diverged step, or the mean
// of rows' steps one of which diverged) is written as null, which JSON has
// in place of NaN and infinity; event.Row reads null back as NaN. A row
// says which unit its samples count ("unit":"tokens" for a language
// model's tokens; none for samples).
//
// Under a launcher that observes the job (`gotrain run --metrics-addr`,
// `--dashboard`, `--trace`, `--metrics`: it sets GOTRAIN_OBSERVE), the
// rows and spans go to the launcher over the progress pipe instead, and
// the launcher writes the files, serves Prometheus and the dashboard.
//
// Recording costs a few clock reads, one DDP Stats copy and, per row
// written, one JSON encoding: a few microseconds a step.
package metrics

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gotrain/gotrain/ddp"
	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/event"
	"github.com/gotrain/gotrain/progress"
)

// Config says what a Recorder records and where. The zero value records
// nothing but still times steps (see Recorder.Last).
type Config struct {
	// File receives the rows as JSON lines ("" for none); it is created
	// or truncated. Under a launcher that writes the metrics file itself
	// (gotrain run --metrics) File is not used.
	File string
	// Trace receives the timeline as Chrome trace-event JSON ("" for
	// none); under a launcher that writes the trace (--trace) the spans go
	// to it, and it merges every rank's.
	Trace string
	// Every writes one row per Every steps (default 1).
	Every int
	// Rank is this process's rank without a Group (with one, the
	// group's); 0 means $RANK, or 0.
	Rank int
	// Group, if set, gives the bytes sent per peer.
	Group *distributed.Group
	// Model, if set, gives the exposed allreduce wait and the bucket
	// spans of the timeline.
	Model *ddp.Model
	// Reporter, if it sends to a launcher, carries the rows and spans the
	// launcher asks for (see event.EnvObserve).
	Reporter *progress.Reporter
	// Tokens says that a step's samples are tokens: the rows' unit.
	Tokens bool
}

// Recorder records one rank's steps. It is for the goroutine running the
// loop, except that DDP reports bucket spans from its own.
type Recorder struct {
	cfg     Config
	restart int
	rep     *progress.Reporter // nil unless the launcher takes rows
	file    *os.File
	w       *bufio.Writer
	flushed time.Time
	trace   *tracer // nil without a timeline

	epoch    int
	steps    int
	dataFrom time.Time // when the loop went to fetch the next batch
	st       Step
	acc      event.Row // the rows' sums over the steps since the last row
	accN     int
	before   ddp.Stats
	sent     []int64 // BytesSent at the last step's end
	sentNow  []int64
	last     event.Row

	// Rows for the launcher wait in pend, a JSON array's elements, and go
	// in one event per sendPeriod: one pipe write a step would wake the
	// launcher hundreds of times a second on cores the workers need.
	pend     []byte
	pendN    int
	pendSent time.Time
}

// sendRowBytes is the most encoded rows one event to the launcher carries
// (its lines may be 64 KiB).
const sendRowBytes = 32 << 10

// New makes a recorder; its errors are the files'.
func New(cfg Config) (*Recorder, error) {
	if cfg.Every <= 0 {
		cfg.Every = 1
	}
	switch {
	case cfg.Group != nil:
		cfg.Rank = cfg.Group.Rank()
	case cfg.Rank == 0:
		cfg.Rank, _ = strconv.Atoi(os.Getenv("RANK"))
	}
	r := &Recorder{cfg: cfg, dataFrom: time.Now(), flushed: time.Now(), pendSent: time.Now()}
	r.restart, _ = strconv.Atoi(os.Getenv("GOTRAIN_RESTART_COUNT"))
	observe := os.Getenv(event.EnvObserve)
	launched := cfg.Reporter != nil && cfg.Reporter.Launched() && observe != ""
	if launched {
		host, _ := os.Hostname()
		if err := cfg.Reporter.Emit(event.KindHello, event.Hello{Rank: cfg.Rank, Host: host, PID: os.Getpid(), Restart: r.restart}); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	if launched && hasWord(observe, "rows") {
		r.rep = cfg.Reporter
	}
	// The launcher writes the files it was asked for from what the ranks
	// send; the others are this process's to write.
	if cfg.File != "" && !(launched && hasWord(observe, "file")) {
		f, err := os.Create(cfg.File)
		if err != nil {
			return nil, fmt.Errorf("metrics: creating the metrics file: %w", err)
		}
		r.file, r.w = f, bufio.NewWriterSize(f, 64<<10)
	}
	switch {
	case launched && hasWord(observe, "trace"):
		r.trace = newTracer(cfg.Rank, cfg.Reporter, "")
	case cfg.Trace != "":
		r.trace = newTracer(cfg.Rank, nil, cfg.Trace)
	}
	if r.trace != nil && cfg.Model != nil {
		cfg.Model.ObserveBuckets(r.trace.bucket)
	}
	if cfg.Group != nil {
		r.sent = cfg.Group.BytesSent(nil)
		r.sentNow = make([]int64, 0, len(r.sent))
	}
	if cfg.Model != nil {
		r.before = cfg.Model.Stats()
	}
	return r, nil
}

func hasWord(list, w string) bool {
	for f := range strings.SplitSeq(list, ",") {
		if strings.TrimSpace(f) == w {
			return true
		}
	}
	return false
}

// StartEpoch starts epoch (counting from 0, as a loop's index): the next
// step's data phase starts now, not at the previous epoch's last step.
func (r *Recorder) StartEpoch(epoch int) {
	r.epoch = epoch + 1
	r.dataFrom = time.Now()
}

// Step is the step being recorded; Begin returns it.
type Step struct {
	r                  *Recorder
	data, t0, fwd, bwd time.Time
}

// Begin starts a step: the time since the previous step's end (or
// StartEpoch) was the data phase.
func (r *Recorder) Begin() *Step {
	now := time.Now()
	r.st = Step{r: r, data: r.dataFrom, t0: now}
	return &r.st
}

// Forwarded ends the forward phase (and the loss).
func (s *Step) Forwarded() { s.fwd = time.Now() }

// Backwarded ends the backward phase, gradients reduced.
func (s *Step) Backwarded() { s.bwd = time.Now() }

// End ends the step, after the optimizer, over n samples with loss and
// learning rate lr, and writes a row if one is due. Its error is the
// metrics file's or the launcher pipe's encoding.
func (s *Step) End(n int, loss, lr float64) error {
	r := s.r
	now := time.Now()
	if s.fwd.IsZero() {
		s.fwd = s.t0
	}
	if s.bwd.IsZero() {
		s.bwd = s.fwd
	}
	r.steps++
	row := event.Row{Time: unix(now), Start: unix(s.data), Rank: r.cfg.Rank, Restart: r.restart,
		Epoch: max(r.epoch, 1), Step: r.steps, Steps: 1, Loss: loss, LR: lr, Samples: n, Unit: r.unit(),
		DataMS: ms(s.t0.Sub(s.data)), ForwardMS: ms(s.fwd.Sub(s.t0)),
		BackwardMS: ms(s.bwd.Sub(s.fwd)), OptimizerMS: ms(now.Sub(s.bwd))}
	row.StepMS = ms(now.Sub(s.data))
	var exposed time.Duration
	if m := r.cfg.Model; m != nil {
		st := m.Stats()
		exposed = st.ExposedWait - r.before.ExposedWait
		row.ExposedWaitMS = ms(exposed)
		row.AllReduceMS = ms(st.Reducing - r.before.Reducing)
		r.before = st
	}
	if r.trace != nil {
		r.trace.step(s, now, exposed, r.steps)
	}
	r.dataFrom = now
	r.add(row)
	if r.accN < r.cfg.Every {
		return nil
	}
	return r.emit()
}

// add sums row into the pending one.
func (r *Recorder) add(row event.Row) {
	a := &r.acc
	if r.accN == 0 {
		*a = row
		a.BytesSent = nil
	} else {
		a.Time, a.Epoch, a.Step, a.LR = row.Time, row.Epoch, row.Step, row.LR
		a.Steps++
		a.Loss += row.Loss
		a.Samples += row.Samples
		a.StepMS += row.StepMS
		a.DataMS += row.DataMS
		a.ForwardMS += row.ForwardMS
		a.BackwardMS += row.BackwardMS
		a.ExposedWaitMS += row.ExposedWaitMS
		a.OptimizerMS += row.OptimizerMS
		a.AllReduceMS += row.AllReduceMS
	}
	r.accN++
}

// emit turns the sums into means and writes the row.
func (r *Recorder) emit() error {
	row := r.acc
	n := float64(r.accN)
	r.accN = 0
	if row.StepMS > 0 {
		row.SamplesPerSec = float64(row.Samples) / (row.StepMS / 1e3)
	}
	row.Loss /= n
	for _, p := range []*float64{&row.StepMS, &row.DataMS, &row.ForwardMS, &row.BackwardMS, &row.ExposedWaitMS, &row.OptimizerMS, &row.AllReduceMS} {
		*p /= n
	}
	if g := r.cfg.Group; g != nil {
		r.sentNow = g.BytesSent(r.sentNow[:0])
		row.BytesSent = make(map[string]int64, len(r.sentNow))
		for peer, b := range r.sentNow {
			if peer != g.Rank() {
				row.BytesSent[strconv.Itoa(peer)] = b - r.sent[peer]
			}
		}
		r.sent, r.sentNow = r.sentNow, r.sent
	}
	r.last = row
	if r.rep == nil && r.w == nil {
		return nil
	}
	b, err := json.Marshal(row)
	if err != nil {
		return fmt.Errorf("metrics: encoding a row: %w", err)
	}
	now := time.Now()
	if r.rep != nil {
		if len(r.pend)+len(b) > sendRowBytes {
			if err := r.sendRows(now); err != nil {
				return err
			}
		}
		r.pend = append(append(r.pend, ','), b...)
		r.pendN++
		if now.Sub(r.pendSent) >= sendPeriod {
			if err := r.sendRows(now); err != nil {
				return err
			}
		}
	}
	if r.w != nil {
		_, _ = r.w.Write(append(b, '\n'))
		if now.Sub(r.flushed) >= time.Second {
			r.flushed = now
			if err := r.w.Flush(); err != nil {
				return fmt.Errorf("metrics: writing %s: %w", r.cfg.File, err)
			}
		}
	}
	return nil
}

// sendRows sends the pending rows to the launcher as one event.
func (r *Recorder) sendRows(now time.Time) error {
	r.pendSent = now
	if r.pendN == 0 {
		return nil
	}
	r.pend[0] = '[' // the first element's comma
	r.pend = append(r.pend, ']')
	err := r.rep.Emit(event.KindRow, json.RawMessage(r.pend))
	r.pend, r.pendN = r.pend[:0], 0
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}

// Last returns the last row written (the zero event.Row before the first).
func (r *Recorder) Last() event.Row { return r.last }

// Span records a named span of the loop outside the steps (a checkpoint
// save, an evaluation) from start to end on the timeline, and moves the
// next step's data phase start past it.
func (r *Recorder) Span(name string, start, end time.Time) {
	if r.trace != nil {
		r.trace.span(name, tidCompute, start, end, nil)
	}
	if r.dataFrom.Before(end) {
		r.dataFrom = r.dataFrom.Add(end.Sub(start))
	}
}

// Close writes the pending row, flushes the metrics file and writes the
// timeline (or sends its last spans).
func (r *Recorder) Close() error {
	var first error
	keep := func(err error) {
		if first == nil {
			first = err
		}
	}
	if r.accN > 0 {
		keep(r.emit())
	}
	if r.rep != nil {
		keep(r.sendRows(time.Now()))
	}
	if r.file != nil {
		keep(r.w.Flush())
		keep(r.file.Close())
		r.file, r.w = nil, nil
	}
	if r.trace != nil {
		if r.cfg.Model != nil {
			r.cfg.Model.ObserveBuckets(nil)
		}
		keep(r.trace.close())
		r.trace = nil
	}
	if first != nil {
		return fmt.Errorf("metrics: %w", first)
	}
	return nil
}

func unix(t time.Time) float64   { return float64(t.UnixNano()) / 1e9 }
func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// unit is the rows' Unit.
func (r *Recorder) unit() string {
	if r.cfg.Tokens {
		return "tokens"
	}
	return ""
}

// Active reports whether the recorder sends or writes anything: rows to a
// file or a launcher, or a timeline.
func (r *Recorder) Active() bool { return r.rep != nil || r.w != nil || r.trace != nil }
