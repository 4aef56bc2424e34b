package launch

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// A Go program that panics, or that its runtime stops ("fatal error:
// runtime: out of memory"), writes its reason on one line and then the
// stacks of its goroutines: hundreds of lines that bury the reason on the
// console and push it out of the failure report's tail. The launcher
// recognises such a crash in a worker's stderr, writes the whole text to
// a report file and shows the reason's line with the file's path instead.

// crashMarkers begin the line with which Go's runtime reports a crash.
var crashMarkers = []string{"panic: ", "fatal error: "}

// dumpMarkers begin a line that confirms a crash report: Go prints its
// goroutine stacks (or the runtime's own) after the reason.
var dumpMarkers = []string{"goroutine ", "runtime stack:", "[signal "}

// maxReasonLines bounds the lines of a reason (a multi-line panic value)
// held back while the launcher waits for the stacks that confirm it.
const maxReasonLines = 16

// crashFilter reads a worker's raw stderr and yields it unchanged, except
// for a Go crash report: from its reason's line on, what the worker writes
// goes to a report file, and the filter yields the reason's line ending in
// the file's path. Every raw byte also goes to raw (the stderr log file),
// if not nil. Only the pump goroutine of the stream uses it.
type crashFilter struct {
	r    io.Reader
	raw  io.Writer
	open func() (io.WriteCloser, string, error) // creates the report file

	buf  []byte
	out  bytes.Buffer // filtered bytes for Read
	line []byte       // the line being read at a line start, held while it may be a reason
	pass bool         // inside a line that is passed through as it comes
	held [][]byte     // a reason's lines (each with its '\n'), held until the stacks confirm it
	// blank is set once a blank line followed the reason: the next line
	// confirms the crash or ends the wait.
	blank  bool
	report io.WriteCloser // the report file, once a crash is confirmed
	err    error          // the read error that ended the stream
}

// newCrashFilter returns the filter of r; open creates the report file
// and returns its path.
func newCrashFilter(r io.Reader, raw io.Writer, open func() (io.WriteCloser, string, error)) *crashFilter {
	return &crashFilter{r: r, raw: raw, open: open, buf: make([]byte, 32<<10)}
}

// Read returns the filtered stream.
func (f *crashFilter) Read(p []byte) (int, error) {
	for f.out.Len() == 0 && f.err == nil {
		n, err := f.r.Read(f.buf)
		if n > 0 {
			if f.raw != nil {
				_, _ = f.raw.Write(f.buf[:n]) // a full disk must not stop the job
			}
			f.feed(f.buf[:n])
		}
		if err != nil {
			f.finish()
			f.err = err
		}
	}
	if f.out.Len() > 0 {
		return f.out.Read(p)
	}
	return 0, f.err
}

// feed takes the bytes of one read.
func (f *crashFilter) feed(b []byte) {
	for len(b) > 0 {
		if f.report != nil {
			_, _ = f.report.Write(b)
			return
		}
		if f.pass {
			// A '\r' (a redrawn line) starts a line as a '\n' does.
			i := bytes.IndexAny(b, "\r\n")
			if i < 0 {
				f.out.Write(b)
				return
			}
			f.out.Write(b[:i+1])
			b, f.pass = b[i+1:], false
			continue
		}
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			f.line = append(f.line, b...)
			f.checkPartial()
			return
		}
		f.line = append(f.line, b[:i+1]...)
		b = b[i+1:]
		line := f.line
		f.line = nil
		f.endLine(line)
	}
}

// checkPartial passes the held start of a line on once it can no longer
// be a reason (or, while a reason waits, a line that confirms it).
func (f *crashFilter) checkPartial() {
	if f.held != nil || mayStart(f.line, crashMarkers) {
		return
	}
	f.out.Write(f.line)
	f.line, f.pass = nil, true
}

// endLine takes a whole line, with its '\n'.
func (f *crashFilter) endLine(line []byte) {
	text := strings.TrimRight(string(line), "\r\n")
	switch {
	case f.held == nil && hasPrefix(text, crashMarkers):
		f.held, f.blank = [][]byte{line}, false
	case f.held == nil:
		f.out.Write(line)
	case hasPrefix(text, dumpMarkers):
		f.confirm(line)
	case text == "":
		f.held, f.blank = append(f.held, line), true
	case f.blank || len(f.held) >= maxReasonLines:
		f.release()
		f.endLine(line) // it may start a report of its own
	default:
		f.held = append(f.held, line) // the reason goes on
	}
}

// confirm starts the report with the held lines and line, and yields the
// reason's line with the report's path.
func (f *crashFilter) confirm(line []byte) {
	reason := strings.TrimRight(string(f.held[0]), "\r\n")
	w, path, err := f.open()
	if err != nil {
		// No file: the report stays on the console, as the worker wrote it.
		f.release()
		f.out.Write(line)
		f.pass = false
		return
	}
	for _, l := range f.held {
		_, _ = w.Write(l)
	}
	_, _ = w.Write(line)
	f.report, f.held = w, nil
	fmt.Fprintf(&f.out, "%s (Go runtime crash: goroutine stacks in %s)\n", reason, path)
}

// release gives up waiting: the held lines were no crash report.
func (f *crashFilter) release() {
	for _, l := range f.held {
		f.out.Write(l)
	}
	f.held, f.blank = nil, false
}

// finish ends the stream: a report file is closed, held lines are
// yielded as they were.
func (f *crashFilter) finish() {
	if f.report != nil {
		_ = f.report.Close()
		return
	}
	f.release()
	f.out.Write(f.line)
	f.line = nil
}

// hasPrefix reports whether s begins with one of prefixes.
func hasPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// mayStart reports whether a line beginning with b may still begin with
// one of prefixes (or does).
func mayStart(b []byte, prefixes []string) bool {
	for _, p := range prefixes {
		n := min(len(b), len(p))
		if string(b[:n]) == p[:n] {
			return true
		}
	}
	return false
}

// crashReportFile returns the opener of the crash report of the worker
// of global rank rank: crash.txt beside its stderr.log under logDir, or
// without one a file in the temporary directory named by the run and
// the rank, which is kept for the user to read.
func crashReportFile(logDir string, localRank, rank int, runID string, pid func() int) func() (io.WriteCloser, string, error) {
	return func() (io.WriteCloser, string, error) {
		if logDir != "" {
			dir := filepath.Join(logDir, strconv.Itoa(localRank))
			if err := os.MkdirAll(dir, 0o755); err == nil {
				path := filepath.Join(dir, "crash.txt")
				if f, err := os.Create(path); err == nil {
					return f, path, nil
				}
			}
		}
		safe := strings.Map(func(r rune) rune {
			if r == '/' || r == os.PathSeparator {
				return '_'
			}
			return r
		}, runID)
		f, err := os.CreateTemp("", fmt.Sprintf("gotrain-crash-%s-rank%d-pid%d-*.txt", safe, rank, pid()))
		if err != nil {
			return nil, "", err
		}
		return f, f.Name(), nil
	}
}
