package launch

import (
	"bufio"
	"errors"
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
// raw bytes to file if it is not nil. A final line without a newline gets
// one on the console. Write errors do not stop the copy: a worker must never
// block on a full pipe because the launcher's output went away. pumpLines
// returns at EOF, or when r is closed under it.
func pumpLines(r io.Reader, prefix string, console, file io.Writer) {
	br := bufio.NewReaderSize(r, maxLine)
	line := make([]byte, 0, len(prefix)+maxLine+1)
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			if file != nil {
				_, _ = file.Write(chunk) // a full disk must not stop the job; the console still has the line
			}
			line = append(append(line[:0], prefix...), chunk...)
			if line[len(line)-1] != '\n' {
				line = append(line, '\n')
			}
			_, _ = console.Write(line)
		}
		// io.EOF, os.ErrClosed (the launcher gave up on a pipe held open
		// by an escaped grandchild) and read errors all end the copy.
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}
