// Package console owns the terminal of a gotrain command: it renders the
// progress events of the workers (JSON lines of package event, which
// package progress sends) and prints every line of output (the workers'
// prefixed lines, the launcher's log records) without tearing the
// display.
//
// On a terminal the display is one live line, a bar for the current epoch
// with the loss, samples/s, the ETA and the slowest rank's step time,
// redrawn in place and cut to the terminal's width so it never wraps;
// output lines are printed above it. Elsewhere (a pipe, a file, CI) it
// writes plain lines instead, one every LogEvery and one at the end of each
// epoch, and never a carriage return.
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
}

// epochState aggregates one epoch's reports from every rank.
type epochState struct {
	epoch, epochs, steps int
	unit                 string
	ranks                map[int]*rankState
}

// rankState is one rank's latest report within an epoch.
type rankState struct {
	step     int
	samples  int64
	elapsed  float64 // seconds from the epoch's start to the last step
	loss     float64
	hasLoss  bool
	stepTime float64
	done     bool
	metrics  map[string]float64
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
	rs := es.ranks[rank]
	if rs == nil {
		rs = &rankState{}
		es.ranks[rank] = rs
	}
	if ev.Kind != "epoch" {
		rs.step, rs.samples, rs.elapsed, rs.stepTime = ev.Step, ev.Samples, ev.Elapsed, ev.StepTime
		if ev.Loss != nil {
			rs.loss, rs.hasLoss = *ev.Loss, true
		}
		if ev.Kind == "done" {
			rs.done, rs.metrics = true, ev.Metrics
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
	if !c.live {
		c.buf = c.buf[:0]
		for _, l := range finished {
			c.buf = append(append(c.buf, l...), '\n')
		}
		if current != nil && (kind == "step" || kind == "last") && now.Sub(c.lastPlain) >= c.logEvery {
			c.lastPlain = now
			c.buf = append(append(c.buf, current.statusLine(false, 0)...), '\n')
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
		c.buf = append(append(c.buf, l...), '\n') // a record: whole, if wrapped
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
			lines = append(lines, es.summaryLine())
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
// the job's total rate, the ranks' mean loss.
type view struct {
	step, slowRank int
	rate, loss     float64
	hasLoss        bool
	elapsed        float64 // of the slowest rank
	stepTime       float64 // slowest rank's step time
	stepRank       int
	metrics        map[string]float64
}

func (es *epochState) view() view {
	v := view{step: math.MaxInt, metrics: map[string]float64{}}
	var lossSum float64
	var losses int
	for _, r := range sortedKeys(es.ranks) {
		rs := es.ranks[r]
		if rs.step < v.step {
			v.step, v.slowRank, v.elapsed = rs.step, r, rs.elapsed
		}
		if rs.elapsed > 0 {
			v.rate += float64(rs.samples) / rs.elapsed
		}
		if rs.hasLoss {
			lossSum += rs.loss
			losses++
		}
		if rs.stepTime > v.stepTime {
			v.stepTime, v.stepRank = rs.stepTime, r
		}
		for k, m := range rs.metrics {
			if _, ok := v.metrics[k]; !ok { // the lowest rank's value wins
				v.metrics[k] = m
			}
		}
	}
	if losses > 0 {
		v.loss, v.hasLoss = lossSum/float64(losses), true
	}
	return v
}

func (es *epochState) unitName() string {
	if es.unit == "" {
		return "samples"
	}
	return es.unit
}

// statusLine is the running epoch's line: with a bar fitted to width on a
// terminal, plain otherwise. The parts come most important first, so that
// cutting the line to a narrow width keeps them.
func (es *epochState) statusLine(bar bool, width int) string {
	v := es.view()
	head := fmt.Sprintf("epoch %d/%d", es.epoch, max(es.epochs, es.epoch))
	count := fmt.Sprintf("%d/%d", v.step, es.steps)
	if es.steps == 0 {
		count = fmt.Sprintf("step %d", v.step)
	}
	sep := "  "
	if bar {
		sep = " " // a terminal line is narrow
	}
	var tail []string
	if es.steps > 0 && !bar {
		tail = append(tail, fmt.Sprintf("%d%%", 100*v.step/es.steps))
	}
	if v.hasLoss {
		tail = append(tail, fmt.Sprintf("loss %.4g", v.loss))
	}
	tail = append(tail, fmt.Sprintf("%.0f %s/s", v.rate, es.unitName()))
	if es.steps > 0 && v.step > 0 && v.elapsed > 0 {
		eta := v.elapsed / float64(v.step) * float64(es.steps-v.step)
		tail = append(tail, "ETA "+clock(eta))
	}
	if v.stepTime > 0 {
		s := "step " + millis(v.stepTime)
		if len(es.ranks) > 1 && bar {
			s += fmt.Sprintf(" r%d", v.stepRank)
		} else if len(es.ranks) > 1 {
			s = fmt.Sprintf("slowest step %s (rank %d)", millis(v.stepTime), v.stepRank)
		}
		tail = append(tail, s)
	}
	rest := strings.Join(tail, sep)
	text := head + " " + count + " " + rest
	if !bar {
		return text
	}
	// One column is kept free: a line that fills the last column leaves
	// some terminals about to wrap.
	if es.steps > 0 {
		if bw := min(width-1-len(head)-len(count)-len(rest)-5, 30); bw >= 6 {
			return head + " [" + drawBar(bw, v.step, es.steps) + "] " + count + " " + rest
		}
		// Narrow: the bar alone says how far the epoch is.
		if bw := min(width-1-len(head)-len(rest)-4, 30); bw >= 6 {
			return head + " [" + drawBar(bw, v.step, es.steps) + "] " + rest
		}
	}
	return fit(text, width)
}

// drawBar is a bar of width columns, step of steps full.
func drawBar(width, step, steps int) string {
	filled := min(width*step/steps, width)
	b := strings.Repeat("=", filled)
	if filled < width {
		b += ">" + strings.Repeat(" ", width-filled-1)
	}
	return b
}

// summaryLine is the line an epoch leaves when every rank is done.
func (es *epochState) summaryLine() string {
	v := es.view()
	parts := []string{fmt.Sprintf("epoch %d/%d: %d steps", es.epoch, max(es.epochs, es.epoch), v.step)}
	if v.hasLoss {
		parts = append(parts, fmt.Sprintf("train_loss %.4f", v.loss))
	}
	for _, k := range sortedKeys(v.metrics) {
		parts = append(parts, fmt.Sprintf("%s %.4f", k, v.metrics[k]))
	}
	parts = append(parts, fmt.Sprintf("%.0f %s/s", v.rate, es.unitName()), clock(v.elapsed))
	return strings.Join(parts, " ")
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
