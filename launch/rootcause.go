package launch

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gotrain/gotrain/event"
)

// Bounds of the stderr tail kept per worker for the failure report.
const (
	tailLines   = 10  // lines kept
	tailLineLen = 500 // bytes kept of each line
)

// Failure is the report on a failed worker and, as the root cause of a
// failed job, the first primary failure: where it ran, how it ended, why
// it counts as the cause, and the last lines it wrote to stderr.
//
// A primary failure is a rank's own: an error of its own, a signal that
// killed or stopped it, or silence (it stopped answering, and the others
// failed because of it). A secondary one is the fallout: a rank that
// failed because another did (it exited with event.ExitPeer, naming that
// rank) or because the launcher stopped it.
type Failure struct {
	Rank, LocalRank int
	Host            string
	PID             int
	ExitCode        int            // 128+signal if a signal killed it
	Signal          syscall.Signal // the signal that killed it, or 0
	Restarts        int            // restarts done before this failure
	MaxRestarts     int
	Stderr          []string // its last stderr lines, oldest first

	// Time is when the launcher saw it fail.
	Time time.Time `json:",omitzero"`
	// Stopped is the signal that had stopped the worker (SIGSTOP,
	// SIGTSTP) when the job failed, or 0; its exit is then the launcher's
	// SIGKILL.
	Stopped syscall.Signal `json:",omitempty"`
	// Secondary means it failed only because of another rank, or because
	// the launcher stopped it.
	Secondary bool `json:",omitempty"`
	// Blames says it named the rank it failed because of: BlameRank, and
	// Silence, how long that rank had sent nothing (0 when it was not
	// silence).
	Blames    bool          `json:",omitempty"`
	BlameRank int           `json:",omitempty"`
	Silence   time.Duration `json:",omitempty"`
	// Silent means the rank is the root cause because the others failed
	// waiting for it, not through a failure of its own.
	Silent bool `json:",omitempty"`
	// BlamedBy are the ranks that failed because of this one.
	BlamedBy []int `json:",omitempty"`
	// Reason, if set, is the root cause when it is no worker (Rank is
	// then -1): a node that became unreachable.
	Reason string `json:",omitempty"`
}

// SignalName is sig as its constant is named: "SIGTERM".
func SignalName(sig syscall.Signal) string {
	if name := unix.SignalName(sig); name != "" {
		return name
	}
	return "signal " + strconv.Itoa(int(sig))
}

// Cause says how the worker ended and why it is to blame: "exit status
// 3", "terminated by SIGTERM", "stopped (SIGSTOP) — no heartbeat for 14s"
// or "went silent (no heartbeat for 14s); the launcher ended it
// (terminated by SIGKILL)".
func (f Failure) Cause() string {
	ended := describeExit(f.ExitCode)
	if f.Signal != 0 {
		ended = "terminated by " + SignalName(f.Signal)
	}
	silence := ""
	if f.Silence > 0 {
		silence = fmt.Sprintf("no heartbeat for %v", f.Silence.Round(100*time.Millisecond))
	}
	switch {
	case f.Reason != "":
		return f.Reason
	case f.Stopped != 0 && silence != "":
		return "stopped (" + SignalName(f.Stopped) + ") — " + silence
	case f.Stopped != 0:
		return "stopped (" + SignalName(f.Stopped) + ")"
	case f.Silent:
		s := "went silent: the others failed waiting for it"
		if silence != "" {
			s = "went silent (" + silence + ")"
		}
		if f.PID != 0 { // a worker of this launcher, which ended it
			s += "; the launcher ended it (" + ended + ")"
		}
		return s
	case f.Secondary && f.Blames:
		return ended + ", because of rank " + strconv.Itoa(f.BlameRank)
	}
	return ended
}

// String is the report as a block of lines, each ending in '\n', for a
// person to read on the console.
func (f Failure) String() string {
	var b strings.Builder
	switch {
	case f.Rank < 0:
		fmt.Fprintf(&b, "launch: job failed; root cause: %s\n", f.Cause())
	case f.PID == 0 && f.Host != "":
		fmt.Fprintf(&b, "launch: job failed; root cause: rank %d on %s: %s\n", f.Rank, f.Host, f.Cause())
	case f.PID == 0:
		fmt.Fprintf(&b, "launch: job failed; root cause: rank %d: %s\n", f.Rank, f.Cause())
	default:
		fmt.Fprintf(&b, "launch: job failed; root cause: rank %d (local rank %d) on %s, pid %d: %s\n",
			f.Rank, f.LocalRank, f.Host, f.PID, f.Cause())
	}
	fmt.Fprintf(&b, "  exit code %d; %d of %d restarts used\n", f.ExitCode, f.Restarts, f.MaxRestarts)
	if len(f.BlamedBy) > 0 {
		fmt.Fprintf(&b, "  %s failed because of it\n", rankList(f.BlamedBy))
	}
	if f.Rank < 0 || f.PID == 0 {
		return b.String() // no stderr of its own here
	}
	switch len(f.Stderr) {
	case 0:
		b.WriteString("  its stderr was empty\n")
		return b.String()
	case 1:
		b.WriteString("  last line of its stderr:\n")
	default:
		fmt.Fprintf(&b, "  last %d lines of its stderr:\n", len(f.Stderr))
	}
	for _, l := range f.Stderr {
		b.WriteString("    " + l + "\n")
	}
	return b.String()
}

// rankList is "rank 2" or "ranks 0, 1 and 3".
func rankList(ranks []int) string {
	s := make([]string, len(ranks))
	for i, r := range ranks {
		s[i] = strconv.Itoa(r)
	}
	if len(s) == 1 {
		return "rank " + s[0]
	}
	return "ranks " + strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// attrs are the report as log attributes, for a machine to read.
func (f Failure) attrs() []any {
	return []any{"rank", f.Rank, "local_rank", f.LocalRank, "host", f.Host, "pid", f.PID,
		"exit_code", f.ExitCode, "cause", f.Cause(), "restarts", f.Restarts,
		"max_restarts", f.MaxRestarts, "blamed_by", f.BlamedBy, "stderr_tail", f.Stderr}
}

// failure is the report on w, which failed after restarts restarts.
func (j *job) failure(w *worker, restarts int) Failure {
	host, err := os.Hostname()
	if err != nil {
		host = "localhost"
	}
	f := Failure{Rank: w.rank, LocalRank: w.localRank, Host: host, PID: w.pid(), ExitCode: w.code,
		Restarts: restarts, MaxRestarts: j.cfg.MaxRestarts, Stderr: w.stderrTail.lines()}
	if w.code > 128 && w.code < 128+65 {
		f.Signal = syscall.Signal(w.code - 128)
	}
	if w.code == event.ExitPeer {
		f.Secondary = true
		// The last such line: the worker's own verdict, written last.
		for i := len(f.Stderr) - 1; i >= 0; i-- {
			if rank, silence, ok := event.ParsePeerLine(f.Stderr[i]); ok {
				f.Blames, f.BlameRank, f.Silence = true, rank, silence
				break
			}
		}
	}
	return f
}

// RootCause picks the root cause among the failures of one attempt (of
// one node, or of all): the earliest primary failure; else the rank the
// secondary failures blame, following the chain (rank 2 blamed rank 0,
// which blamed rank 1) to a rank that blamed nobody, reported as gone
// silent; else the earliest failure. The result's BlamedBy lists the
// ranks that blamed it. It returns false for no failures.
func RootCause(fs []Failure) (Failure, bool) {
	if len(fs) == 0 {
		return Failure{}, false
	}
	byTime := slices.Clone(fs)
	slices.SortStableFunc(byTime, func(a, b Failure) int { return a.Time.Compare(b.Time) })
	var root Failure
	found := false
	for _, f := range byTime {
		if !f.Secondary || f.Stopped != 0 {
			root, found = f, true
			break
		}
	}
	if !found {
		root, found = blamed(byTime)
	}
	if !found {
		root = byTime[0]
	}
	root.BlamedBy = nil
	for _, f := range fs {
		if f.Blames && f.BlameRank == root.Rank && f.Rank != root.Rank && !slices.Contains(root.BlamedBy, f.Rank) {
			root.BlamedBy = append(root.BlamedBy, f.Rank)
			if root.Stopped != 0 {
				root.Silence = max(root.Silence, f.Silence) // how long the others heard nothing
			}
		}
	}
	slices.Sort(root.BlamedBy)
	return root, true
}

// blamed follows the blame from the earliest failure that names a rank
// to a rank that names nobody, and reports that rank as gone silent.
func blamed(byTime []Failure) (Failure, bool) {
	find := func(rank int) *Failure {
		for i := range byTime {
			if byTime[i].Rank == rank && byTime[i].Rank >= 0 {
				return &byTime[i]
			}
		}
		return nil
	}
	var from *Failure
	for i := range byTime {
		if byTime[i].Blames {
			from = &byTime[i]
			break
		}
	}
	if from == nil {
		return Failure{}, false
	}
	seen := map[int]bool{from.Rank: true}
	for {
		next := find(from.BlameRank)
		if next == nil || !next.Blames || seen[next.Rank] {
			break
		}
		seen[next.Rank] = true
		from = next
	}
	// A rank with no report of its own here (it ran on another node)
	// stays secondary: inferred, it gives way to a primary failure that
	// a launcher of several nodes may know of (its node lost).
	root := Failure{Rank: from.BlameRank, LocalRank: -1, ExitCode: from.ExitCode, Time: from.Time, Secondary: true}
	if f := find(from.BlameRank); f != nil {
		root = *f
		root.Secondary = false
	}
	root.Silent, root.Silence = true, from.Silence
	root.Blames, root.BlameRank = false, 0
	return root, true
}

// reportFailure hands the root cause to Config.OnFailure, or logs it as
// one record.
func (j *job) reportFailure(f Failure) {
	if j.cfg.OnFailure != nil {
		j.cfg.OnFailure(f)
		return
	}
	j.log.Error("launch: job failed", f.attrs()...)
}

// WriteFailure is an OnFailure that writes the report's block of lines to
// w in one Write (so it is not interleaved with other output).
func WriteFailure(w io.Writer) func(Failure) {
	return func(f Failure) { _, _ = io.WriteString(w, f.String()) }
}

// tail keeps the last lines of a stream: an io.Writer given the raw bytes
// (in any pieces), which lines returns. Safe for concurrent use.
type tail struct {
	mu      sync.Mutex
	ring    [tailLines]string
	next, n int
	partial []byte // the line being written, up to tailLineLen bytes
	cut     bool   // partial was cut at tailLineLen
}

// Write adds p's lines. It never fails.
func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for rest := p; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		seg := rest
		if i >= 0 {
			seg = rest[:i]
		}
		t.add(seg)
		if i < 0 {
			break
		}
		t.push()
		rest = rest[i+1:]
	}
	return len(p), nil
}

// add appends seg to the current line, within tailLineLen.
func (t *tail) add(seg []byte) {
	room := tailLineLen - len(t.partial)
	if len(seg) > room {
		seg, t.cut = seg[:room], true
	}
	t.partial = append(t.partial, seg...)
}

// push ends the current line. A line redrawn with '\r' keeps what was
// drawn last.
func (t *tail) push() {
	line := string(t.partial)
	if i := strings.LastIndexByte(strings.TrimRight(line, "\r"), '\r'); i >= 0 {
		line = line[i+1:]
	}
	line = strings.TrimRight(line, "\r")
	if t.cut {
		line += "…"
	}
	t.partial, t.cut = t.partial[:0], false
	t.ring[t.next] = line
	t.next = (t.next + 1) % tailLines
	t.n = min(t.n+1, tailLines)
}

// lines returns the kept lines, oldest first, with an unterminated last
// line included.
func (t *tail) lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.n
	if len(t.partial) > 0 && n == tailLines {
		n-- // room for the unterminated line
	}
	out := make([]string, 0, n+1)
	for i := range n {
		out = append(out, t.ring[(t.next-n+i+tailLines)%tailLines])
	}
	if len(t.partial) > 0 {
		out = append(out, strings.TrimRight(string(t.partial), "\r"))
	}
	return out
}
