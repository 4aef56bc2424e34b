// Package console owns the terminal of a gotrain command: it renders the
// progress events of the workers (JSON lines of package event, which
// package progress sends) and prints every line of output (the workers'
// prefixed lines, the launcher's log records) without tearing the
// display.
//
// On a terminal the display is one live line, a bar for the current epoch
// (or evaluation interval) with the step of the run's total, the loss,
// samples/s (or tokens/s), the ETA of the whole run and the slowest
// rank's step time, redrawn in place; output lines are printed above it.
// Elsewhere (a pipe, a file, CI) it writes plain lines instead, one every
// LogEvery and one at the end of each epoch or interval, and never a
// carriage return. Its own lines are never wider than the terminal (80
// columns when it cannot say): the least important fields are left out
// first.
package console

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/gotrain/gotrain/event"
)

// DefaultLogEvery is the period of the plain progress lines.
const DefaultLogEvery = 10 * time.Second

// minRedraw bounds the live display's redraw rate: a terminal gains
// nothing from more than 20 frames a second.
const minRedraw = 50 * time.Millisecond

// Mode chooses between the live display and plain lines.
type Mode int

// The modes: Auto is Live when Out is a terminal, else Plain.
const (
	Auto Mode = iota
	Live
	Plain
)

// Options configures New. The zero value renders on os.Stderr.
type Options struct {
	// Out receives the display and the lines of Writer; nil means
	// os.Stderr.
	Out io.Writer
	// Mode: Auto (the default) is Live if Out is a terminal.
	Mode Mode
	// Width returns the terminal's width in columns; nil asks Out's
	// terminal each redraw (so a resized window is followed), 80 if it
	// cannot say.
	Width func() int
	// LogEvery is the period of Plain mode's progress lines (0 means
	// DefaultLogEvery).
	LogEvery time.Duration
	// Now is the clock (nil means time.Now); tests set it.
	Now func() time.Time
	// Ranks is how many ranks report to this console (a launcher's local
	// workers). An epoch's line waits for all of them, so that a fast
	// rank's end does not print the line before a slow rank has begun;
	// 0 means the ranks seen so far. A rank that sends nothing is waited
	// for only until a later epoch starts, or the console closes.
	Ranks int
}

// Console is one command's display. Its methods are safe for concurrent
// use.
type Console struct {
	mu       sync.Mutex
	out      io.Writer
	live     bool
	width    func() int
	logEvery time.Duration
	now      func() time.Time
	ranks    int

	epochs    map[int]*epochState // epochs started and not yet reported done
	shown     string              // the bar line on screen ("" if none)
	drawn     time.Time           // when shown was drawn
	lastPlain time.Time           // when the last periodic plain line went out
	buf       []byte              // scratch for one write
	writers   []*lineWriter       // flushed by Close
	replicas  string              // "replicas 2/3" in a fault-tolerant job, once one changed
}

// epochState aggregates one epoch's (or evaluation interval's) reports
// from every rank.
type epochState struct {
	epoch, epochs, steps int
	unit, label          string
	ranks                map[int]*rankState
	replicas             string // the console's, for the status line
}

// rankState is one rank's latest report within an epoch.
type rankState struct {
	step     int
	elapsed  float64 // seconds from the epoch's start to the last step
	rate     float64 // samples/s after the epoch's first step; 0 if none yet
	loss     float64
	hasLoss  bool
	stepTime float64
	runStep  int
	runSteps int
	eta      float64
	done     bool
	metrics  map[string]float64
	names    []string
}

// New returns a console rendering on opts.Out.
func New(opts Options) *Console {
	c := &Console{out: opts.Out, width: opts.Width, logEvery: opts.LogEvery, now: opts.Now, ranks: opts.Ranks, epochs: map[int]*epochState{}}
	if c.out == nil {
		c.out = os.Stderr
	}
	switch opts.Mode {
	case Live:
		c.live = true
	case Auto:
		c.live = IsTerminal(c.out)
	}
	if c.width == nil {
		c.width = func() int { return terminalWidth(c.out) }
	}
	if c.logEvery <= 0 {
		c.logEvery = DefaultLogEvery
	}
	if c.now == nil {
		c.now = time.Now
	}
	c.lastPlain = c.now()
	return c
}

// IsTerminal reports whether w is a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func terminalWidth(w io.Writer) int {
	if f, ok := w.(*os.File); ok {
		if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols > 0 {
			return cols
		}
	}
	return 80
}

// Writer returns a writer whose lines are printed on Out above the
// display. A '\r' ends a line as '\n' does (a program's own progress bar
// becomes lines, never a torn display), and empty lines are dropped (the
// '\n' of a "\r\n"). A partial line waits for its end, or for Close.
func (c *Console) Writer() io.Writer { return c.LineWriter(c.out) }

// LineWriter is Writer for lines going to w instead of Out (stdout when
// the display is on stderr): in Live mode, if w is a terminal too, the
// display is cleared before each line and redrawn after it.
func (c *Console) LineWriter(w io.Writer) io.Writer {
	lw := &lineWriter{c: c, w: w, same: w == c.out || IsTerminal(w)}
	c.mu.Lock()
	c.writers = append(c.writers, lw)
	c.mu.Unlock()
	return lw
}

type lineWriter struct {
	c       *Console
	w       io.Writer
	same    bool // shares the screen with the display
	mu      sync.Mutex
	partial []byte
}

func (lw *lineWriter) Write(p []byte) (int, error) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	data := append(lw.partial, p...)
	end := bytes.LastIndexAny(data, "\r\n")
	if end < 0 {
		lw.partial = data
		return len(p), nil
	}
	lw.partial = append([]byte(nil), data[end+1:]...)
	lw.c.printLines(lw.w, lw.same, data[:end+1])
	return len(p), nil
}

// flush prints a partial last line.
func (lw *lineWriter) flush() {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if len(lw.partial) > 0 {
		lw.c.printLines(lw.w, lw.same, append(lw.partial, '\n'))
		lw.partial = nil
	}
}

// printLines writes whole lines to w, each ended by '\n', with the display
// cleared around them if they share its screen.
func (c *Console) printLines(w io.Writer, same bool, data []byte) {
	var lines []byte
	for len(data) > 0 {
		i := bytes.IndexAny(data, "\r\n")
		if i > 0 {
			lines = append(append(lines, data[:i]...), '\n')
		}
		data = data[i+1:]
	}
	if len(lines) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.live || c.shown == "" || !same {
		_, _ = w.Write(lines) // output that went away must not stop the job
		return
	}
	if w == c.out {
		c.buf = append(append(append(c.buf[:0], "\r\x1b[K"...), lines...), c.barSeq(c.shown)...)
		_, _ = w.Write(c.buf)
		return
	}
	_, _ = io.WriteString(c.out, "\r\x1b[K")
	_, _ = w.Write(lines)
	_, _ = io.WriteString(c.out, c.barSeq(c.shown))
}

// barSeq draws line in place of the current one.
func (c *Console) barSeq(line string) string { return "\r" + line + "\x1b[K" }

// Event feeds one progress event (a JSON line, see event.Event) that
// rank sent. Lines that are not events are ignored: the pipe carries what
// a program writes to it.
func (c *Console) Event(rank int, line []byte) {
	switch event.KindOf(line) {
	case "epoch", "step", "done":
	case event.KindReplicas:
		c.replicasEvent(line)
		return
	default:
		return // a row or span for another consumer: not worth decoding
	}
	var ev event.Event
	if err := json.Unmarshal(line, &ev); err != nil || ev.Epoch < 1 ||
		ev.Kind != "epoch" && ev.Kind != "step" && ev.Kind != "done" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	es := c.epochs[ev.Epoch]
	if es == nil {
		es = &epochState{epoch: ev.Epoch, ranks: map[int]*rankState{}}
		c.epochs[ev.Epoch] = es
	}
	es.epochs, es.steps = max(es.epochs, ev.Epochs), max(es.steps, ev.Steps)
	if ev.Unit != "" {
		es.unit = ev.Unit
	}
	if ev.Label != "" {
		es.label = ev.Label
	}
	rs := es.ranks[rank]
	if rs == nil {
		rs = &rankState{}
		es.ranks[rank] = rs
	}
	rs.runStep, rs.runSteps = ev.RunStep, ev.RunSteps
	if ev.Kind != "epoch" {
		rs.step, rs.elapsed, rs.stepTime, rs.rate, rs.eta = ev.Step, ev.Elapsed, ev.StepTime, ev.Rate, ev.ETA
		if ev.Loss != nil {
			rs.loss, rs.hasLoss = *ev.Loss, true
		}
		if ev.Kind == "done" {
			rs.done, rs.metrics, rs.names = true, ev.Metrics, ev.Names
		}
	}
	kind := ev.Kind
	if kind == "step" && ev.Steps > 0 && ev.Step >= ev.Steps {
		kind = "last" // drawn whatever the throttle: no step follows to draw it
	}
	c.update(kind)
}

// update redraws the display (Live) or writes the lines now due (Plain)
// after an event of kind: only steps (other than an epoch's last) are
// throttled, and only steps are worth a periodic plain line.
func (c *Console) update(kind string) {
	now := c.now()
	finished := c.finished(false)
	current := c.current()
	if current != nil {
		current.replicas = c.replicas
	}
	if !c.live {
		c.buf = c.buf[:0]
		for _, l := range finished {
			c.buf = append(append(c.buf, l...), '\n')
		}
		if current != nil && (kind == "step" || kind == "last") && now.Sub(c.lastPlain) >= c.logEvery {
			c.lastPlain = now
			c.buf = append(append(c.buf, current.statusLine(false, c.width())...), '\n')
		}
		if len(c.buf) > 0 {
			_, _ = c.out.Write(c.buf)
		}
		return
	}
	if len(finished) == 0 && kind == "step" && now.Sub(c.drawn) < minRedraw {
		return
	}
	c.drawn = now
	c.buf = append(c.buf[:0], "\r\x1b[K"...)
	for _, l := range finished {
		c.buf = append(append(c.buf, l...), '\n')
	}
	c.shown = ""
	if current != nil {
		c.shown = current.statusLine(true, c.width())
		c.buf = append(c.buf, c.shown...)
	}
	_, _ = c.out.Write(c.buf)
}

// finished removes the epochs whose every rank is done and returns their
// summary lines, in order. An epoch with fewer ranks than Options.Ranks
// is finished only once a later epoch has begun, or at the end.
func (c *Console) finished(end bool) []string {
	var lines []string
	keys := sortedKeys(c.epochs)
	for i, n := range keys {
		es := c.epochs[n]
		complete := end || i < len(keys)-1 || len(es.ranks) >= c.ranks
		if complete && es.allDone() {
			lines = append(lines, es.summaryLine(c.width()))
			delete(c.epochs, n)
		}
	}
	return lines
}

// current is the latest epoch still running, or nil.
func (c *Console) current() *epochState {
	var cur *epochState
	for _, es := range c.epochs {
		if cur == nil || es.epoch > cur.epoch {
			cur = es
		}
	}
	return cur
}

// Close prints the partial last lines of the console's writers and the
// line of an epoch whose reporting ranks are all done (one that waited
// for a rank that never reported), and leaves a live bar still shown (an
// epoch that did not finish) on screen as a line of its own. The console must not be used after.
func (c *Console) Close() {
	c.mu.Lock()
	writers := c.writers
	c.mu.Unlock()
	for _, lw := range writers {
		lw.flush()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	finished := c.finished(true)
	if c.live && c.shown != "" {
		_, _ = io.WriteString(c.out, "\r\x1b[K")
	}
	for _, l := range finished {
		_, _ = io.WriteString(c.out, l+"\n")
	}
	if cur := c.current(); c.live && c.shown != "" && cur != nil {
		_, _ = io.WriteString(c.out, cur.statusLine(true, c.width())+"\n")
	}
	c.shown = ""
	c.epochs = map[int]*epochState{}
}

func (es *epochState) allDone() bool {
	for _, rs := range es.ranks {
		if !rs.done {
			return false
		}
	}
	return len(es.ranks) > 0
}

// view is an epoch's aggregate over its ranks: the slowest rank's place,
// the job's total rate, the ranks' mean loss, the longest ETA.
type view struct {
	step, slowRank    int
	rate, loss        float64
	hasRate, hasLoss  bool
	elapsed           float64 // of the slowest rank
	stepTime          float64 // slowest rank's step time
	stepRank          int
	runStep, runSteps int // the slowest rank's place in the run
	eta               float64
	metrics           map[string]float64
	names             []string // metrics' names, in the program's order
}

func (es *epochState) view() view {
	v := view{step: math.MaxInt, runStep: math.MaxInt, metrics: map[string]float64{}}
	var lossSum float64
	var losses, rated int
	for _, r := range sortedKeys(es.ranks) {
		rs := es.ranks[r]
		if rs.step < v.step {
			v.step, v.slowRank, v.elapsed = rs.step, r, rs.elapsed
		}
		v.runStep, v.runSteps = min(v.runStep, rs.runStep), max(v.runSteps, rs.runSteps)
		if rs.rate > 0 {
			v.rate += rs.rate
			rated++
		}
		v.eta = max(v.eta, rs.eta)
		if rs.hasLoss {
			lossSum += rs.loss
			losses++
		}
		if rs.stepTime > v.stepTime {
			v.stepTime, v.stepRank = rs.stepTime, r
		}
		for _, k := range rs.names {
			if _, ok := rs.metrics[k]; ok && !slices.Contains(v.names, k) {
				v.names = append(v.names, k)
			}
		}
		for k, m := range rs.metrics {
			if _, ok := v.metrics[k]; !ok { // the lowest rank's value wins
				v.metrics[k] = m
			}
		}
	}
	for _, k := range sortedKeys(v.metrics) {
		if !slices.Contains(v.names, k) {
			v.names = append(v.names, k)
		}
	}
	if losses > 0 {
		v.loss, v.hasLoss = lossSum/float64(losses), true
	}
	// The job's rate sums the ranks'. A rank has none before its epoch's
	// second step: the ranks of a data-parallel job step together, so
	// the others' mean stands in for it, rather than a part for the whole.
	if rated > 0 {
		v.rate *= float64(len(es.ranks)) / float64(rated)
		v.hasRate = true
	}
	if v.runStep == math.MaxInt {
		v.runStep = 0
	}
	return v
}

func (es *epochState) unitName() string {
	if es.unit == "" {
		return "samples"
	}
	return es.unit
}

// interval reports whether the epoch is an evaluation interval.
func (es *epochState) interval() bool { return es.label == "eval" }

// part is one field of a line; rank orders what a narrow line keeps
// (lower is kept longer).
type part struct {
	text string
	rank int
	bar  bool // the bar: as wide as the line leaves, within barMin..barMax
}

const (
	barMin = 8 // "[" + 6 + "]"
	barMax = 32
)

// layout joins parts with spaces into a line of fewer than width columns
// (one is kept free: a line that fills the last column leaves some
// terminals about to wrap), leaving out the highest-ranked parts until
// it fits; drawBar draws a kept bar of the width given. A line whose
// first part alone is too wide is cut.
func layout(parts []part, width int, drawBar func(w int) string) string {
	width = max(width, 2)
	kept := slices.Clone(parts)
	size := func() int {
		n := len(kept) - 1
		for _, p := range kept {
			if p.bar {
				n += barMin
			} else {
				n += len(p.text)
			}
		}
		return n
	}
	for len(kept) > 1 && size() >= width {
		worst := 1
		for i, p := range kept {
			if i > 0 && p.rank > kept[worst].rank {
				worst = i
			}
		}
		kept = slices.Delete(kept, worst, worst+1)
	}
	texts := make([]string, len(kept))
	for i, p := range kept {
		texts[i] = p.text
		if p.bar {
			texts[i] = drawBar(min(barMax, barMin+width-1-size()))
		}
	}
	return fit(strings.Join(texts, " "), width)
}

// statusLine is the running epoch's line: with a bar on a terminal, with
// its share done otherwise, fitted to width. An epoch's line counts its
// steps and the run's; an evaluation interval's leads with the run's
// step, its bar the run's progress.
func (es *epochState) statusLine(bar bool, width int) string {
	v := es.view()
	var parts []part
	steps, done := es.steps, v.step
	total := ""
	if v.runSteps > 0 {
		total = fmt.Sprintf("step %d/%d", v.runStep, v.runSteps)
	}
	n := max(es.epochs, es.epoch)
	switch {
	case es.interval() && total != "":
		parts = append(parts, part{text: total, rank: 0})
		steps, done = v.runSteps, v.runStep
		if bar {
			parts = append(parts, part{bar: true, rank: 5})
		} else {
			parts = append(parts, part{text: percent(done, steps), rank: 8})
		}
		parts = append(parts, part{text: fmt.Sprintf("eval %d/%d", es.epoch, n), rank: 1})
	default:
		label := "epoch"
		if es.interval() {
			label = "eval"
		}
		parts = append(parts, part{text: fmt.Sprintf("%s %d/%d", label, es.epoch, n), rank: 0})
		if bar && steps > 0 {
			parts = append(parts, part{bar: true, rank: 5})
		}
		count := fmt.Sprintf("%d/%d", done, steps)
		if steps == 0 {
			count = fmt.Sprintf("step %d", done)
		}
		parts = append(parts, part{text: count, rank: 1})
		if !bar && steps > 0 {
			parts = append(parts, part{text: percent(done, steps), rank: 9})
		}
		// The epoch and its count say the run's place too, unless the
		// run ends within an epoch (a step limit): a narrow line keeps
		// the step time rather than a step of the total it can infer.
		if total != "" {
			rank := 8
			if v.runSteps != n*steps {
				rank = 6
			}
			parts = append(parts, part{text: total, rank: rank})
		}
	}
	if v.hasLoss {
		parts = append(parts, part{text: "loss " + num(v.loss), rank: 2})
	}
	if es.replicas != "" {
		parts = append(parts, part{text: es.replicas, rank: 3})
	}
	if v.hasRate {
		parts = append(parts, part{text: rate(v.rate, es.unitName()), rank: 3})
	}
	if v.eta > 0 {
		parts = append(parts, part{text: "ETA " + clock(v.eta), rank: 4})
	}
	if v.stepTime > 0 {
		s := "step " + millis(v.stepTime)
		if len(es.ranks) > 1 {
			s += fmt.Sprintf(" r%d", v.stepRank) // the slowest rank's
		}
		parts = append(parts, part{text: s, rank: 7})
	}
	return layout(parts, width, func(w int) string { return "[" + drawBar(w-2, done, steps) + "]" })
}

// percent is step of steps as a whole percentage.
func percent(step, steps int) string {
	if steps <= 0 {
		return ""
	}
	return fmt.Sprintf("%d%%", 100*step/steps)
}

// drawBar is a bar of width columns, step of steps full.
func drawBar(width, step, steps int) string {
	filled := min(width*step/max(steps, 1), width)
	b := strings.Repeat("=", filled)
	if filled < width {
		b += ">" + strings.Repeat(" ", width-filled-1)
	}
	return b
}

// summaryLine is the line an epoch leaves when every rank is done,
// fitted to width: the epoch, its steps (an interval's: the run's step
// of its total), the training loss and the metrics, the rate and the
// time; the time, then the rate, then the last metrics are left out
// first.
func (es *epochState) summaryLine(width int) string {
	v := es.view()
	n := max(es.epochs, es.epoch)
	var parts []part
	if es.interval() {
		head := fmt.Sprintf("eval %d/%d: %d steps", es.epoch, n, v.step)
		if v.runSteps > 0 {
			head = fmt.Sprintf("eval %d/%d step %d/%d:", es.epoch, n, v.runStep, v.runSteps)
		}
		parts = append(parts, part{text: head})
	} else {
		parts = append(parts, part{text: fmt.Sprintf("epoch %d/%d: %d steps", es.epoch, n, v.step)})
	}
	if v.hasLoss {
		parts = append(parts, part{text: "train_loss " + num(v.loss), rank: 1})
	}
	for i, k := range v.names {
		parts = append(parts, part{text: k + " " + num(v.metrics[k]), rank: 2 + i})
	}
	if v.hasRate {
		parts = append(parts, part{text: rate(v.rate, es.unitName()), rank: 100})
	}
	parts = append(parts, part{text: clock(v.elapsed), rank: 101})
	return layout(parts, width, nil)
}

// fit cuts s to fewer than width columns (each rune one column: the
// console writes ASCII).
func fit(s string, width int) string {
	if width < 2 {
		width = 2
	}
	r := []rune(s)
	if len(r) < width {
		return s
	}
	return string(r[:width-1])
}

// num formats a loss or a metric: four decimals, or three significant
// digits for a small value such as a learning rate.
func num(v float64) string {
	if a := math.Abs(v); a != 0 && a < 0.01 {
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
	return strconv.FormatFloat(v, 'f', 4, 64)
}

// rate formats a rate in unit per second.
func rate(v float64, unit string) string {
	return fmt.Sprintf("%.0f %s/s", v, unit)
}

// clock formats seconds as m:ss or h:mm:ss.
func clock(sec float64) string {
	s := int(math.Round(sec))
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}

func millis(sec float64) string {
	ms := sec * 1000
	if ms >= 1000 {
		return fmt.Sprintf("%.2fs", sec)
	}
	if ms < 10 {
		return fmt.Sprintf("%.1fms", ms)
	}
	return fmt.Sprintf("%.0fms", ms)
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
