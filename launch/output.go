package launch

import (
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gotrain/gotrain/internal/logging"
)

// maxLine is the longest line written in one piece. A longer line is cut
// into maxLine pieces, each prefixed like a line of its own: holding the
// console for an unbounded line would let one worker stall all the others.
const maxLine = 64 << 10

// lockedWriter makes each Write atomic with respect to the other
// lockedWriters sharing mu, so lines from different workers (and the
// launcher's log records) never interleave mid-line, even when stdout and
// stderr are the same terminal.
type lockedWriter struct {
	mu *sync.Mutex // mu serializes writes to all the console's writers
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// pumpLines copies r to console line by line, each line prefixed, and the
// raw bytes to file if it is not nil. A line ends at '\n' or at '\r', so a
// worker's progress bar (which redraws with '\r') updates in place with its
// prefix instead of waiting for the final newline; the '\n' of a "\r\n" goes
// out bare. A final line without a newline gets one on the console. Write
// errors do not stop the copy: a worker must never block on a full pipe
// because the launcher's output went away. pumpLines returns at EOF, on a
// read error, or when r is closed under it.
func pumpLines(r io.Reader, prefix string, console, file io.Writer) {
	pump(r, func(out, seg []byte) []byte { return append(append(out, prefix...), seg...) }, false, console, file)
}

// pumpJSONLines is pumpLines for a job that logs JSON (--log-format json):
// every console line is one JSON object naming the worker's rank in a
// "rank" field instead of a prefix. A worker's line that is a JSON object
// gets the field unless it has a "rank" of its own; any other line (a
// print, a panic, a progress bar's redraw) becomes a record whose "msg"
// is the line, with the stream it came from. A '\r' ends a record as a
// '\n' does.
func pumpJSONLines(r io.Reader, rank int, stream string, console, file io.Writer) {
	pump(r, func(out, seg []byte) []byte { return appendJSONLine(out, seg, rank, stream, time.Now()) }, true, console, file)
}

// appendJSONLine appends seg, one line of a worker's output with or
// without its '\n' or '\r', to out as a JSON record with rank, and a '\n'.
func appendJSONLine(out, seg []byte, rank int, stream string, now time.Time) []byte {
	line := bytes.TrimRight(seg, "\r\n")
	var fields map[string]json.RawMessage
	if len(line) > 0 && line[0] == '{' && json.Unmarshal(line, &fields) == nil {
		if _, ok := fields["rank"]; ok {
			return append(append(out, line...), '\n')
		}
		out = strconv.AppendInt(append(out, `{"rank":`...), int64(rank), 10)
		if rest := bytes.TrimSpace(line[1:]); len(rest) > 0 && rest[0] != '}' {
			out = append(out, ',')
		}
		return append(append(out, line[1:]...), '\n')
	}
	rec, _ := json.Marshal(struct {
		Time   time.Time `json:"time"`
		Level  string    `json:"level"`
		Msg    string    `json:"msg"`
		Rank   int       `json:"rank"`
		Stream string    `json:"stream"`
	}{now, "INFO", string(line), rank, stream}) // cannot fail: invalid UTF-8 is replaced
	return append(append(out, rec...), '\n')
}

// workerLogFormat is the log format the environment env gives a worker:
// its last GOTRAIN_LOG_FORMAT, as the worker reads it.
func workerLogFormat(env []string) string {
	format := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, logging.EnvFormat+"="); ok {
			format = v
		}
	}
	return format
}

// pump is pumpLines with frame appending each line (with its '\n' or
// '\r', or none for a piece of a longer line) to the console's buffer.
// With ownLines, frame ends every line itself, so the '\n' of a "\r\n"
// is dropped and a cut line gets no '\n' added.
func pump(r io.Reader, frame func(out, seg []byte) []byte, ownLines bool, console, file io.Writer) {
	buf := make([]byte, maxLine)
	// out batches the whole lines of one read into one console write: far
	// fewer system calls than a write per line, still never a torn line.
	out := make([]byte, 0, 2*maxLine)
	flush := func() {
		if len(out) > 0 {
			_, _ = console.Write(out)
			out = out[:0]
		}
	}
	add := func(seg []byte, addNewline bool) {
		out = frame(out, seg)
		if addNewline && !ownLines {
			out = append(out, '\n')
		}
		if len(out) >= maxLine {
			flush()
		}
	}
	start, end := 0, 0 // buf[start:end] is read but not yet written out
	afterCR := false   // the last segment written ended with '\r'
	for {
		n, err := r.Read(buf[end:])
		if n > 0 && file != nil {
			_, _ = file.Write(buf[end : end+n]) // a full disk must not stop the job; the console still has it
		}
		end += n
		for {
			i := bytes.IndexAny(buf[start:end], "\r\n")
			if i < 0 {
				break
			}
			seg := buf[start : start+i+1]
			if afterCR && i == 0 && seg[0] == '\n' {
				if !ownLines {
					out = append(out, '\n') // the rest of a "\r\n": ends the line already shown
				}
			} else {
				add(seg, false)
			}
			afterCR = seg[i] == '\r'
			start += i + 1
		}
		switch {
		case start == end:
			start, end = 0, 0
		case end == len(buf) && start > 0:
			end = copy(buf, buf[start:end])
			start = 0
		case end == len(buf):
			add(buf, true) // a line longer than maxLine goes out in pieces
			start, end, afterCR = 0, 0, false
		}
		if err != nil {
			// io.EOF, os.ErrClosed (the launcher gave up on a pipe held
			// open by an escaped grandchild) and read errors all end the copy.
			if start < end {
				add(buf[start:end], true)
			}
			flush()
			return
		}
		flush()
	}
}
