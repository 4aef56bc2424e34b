package launch

import (
	"bytes"
	"io"
	"sync"
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
		out = append(append(out, prefix...), seg...)
		if addNewline {
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
				out = append(out, '\n') // the rest of a "\r\n": ends the line already shown
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
