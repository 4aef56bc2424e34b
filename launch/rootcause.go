package launch

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Bounds of the stderr tail kept per worker for the failure report.
const (
	tailLines   = 10  // lines kept
	tailLineLen = 500 // bytes kept of each line
)

// Failure is the root cause of a failed job: the first worker that failed,
// where, how, and the last lines it wrote to stderr.
type Failure struct {
	Rank, LocalRank int
	Host            string
	PID             int
	ExitCode        int            // 128+signal if a signal killed it
	Signal          syscall.Signal // the signal that killed it, or 0
	Restarts        int            // restarts done before this failure
	MaxRestarts     int
	Stderr          []string // its last stderr lines, oldest first
}

// Cause says how the worker ended: "exit status 3" or "killed by signal
// SIGKILL (killed)".
func (f Failure) Cause() string {
	if f.Signal != 0 {
		name := unix.SignalName(f.Signal)
		if name == "" {
			name = "signal " + strconv.Itoa(int(f.Signal))
		}
		return "killed by signal " + name + " (" + f.Signal.String() + ")"
	}
	return describeExit(f.ExitCode)
}

// String is the report as a block of lines, each ending in '\n', for a
// person to read on the console.
func (f Failure) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "launch: job failed; root cause: rank %d (local rank %d) on %s, pid %d: %s\n",
		f.Rank, f.LocalRank, f.Host, f.PID, f.Cause())
	fmt.Fprintf(&b, "  exit code %d; %d of %d restarts used\n", f.ExitCode, f.Restarts, f.MaxRestarts)
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

// attrs are the report as log attributes, for a machine to read.
func (f Failure) attrs() []any {
	return []any{"rank", f.Rank, "local_rank", f.LocalRank, "host", f.Host, "pid", f.PID,
		"exit_code", f.ExitCode, "cause", f.Cause(), "restarts", f.Restarts,
		"max_restarts", f.MaxRestarts, "stderr_tail", f.Stderr}
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
	return f
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

// teeTail returns a writer to both t and file (if file is not nil).
func teeTail(t *tail, file io.Writer) io.Writer {
	if file == nil {
		return t
	}
	return io.MultiWriter(file, t)
}
