package observe

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	"github.com/gotrain/gotrain/event"
)

// traceFile is the merged timeline: every rank's spans, as they arrive,
// in one Chrome trace-event file, one process track per rank.
type traceFile struct {
	path  string
	f     *os.File
	w     *bufio.Writer
	n     int
	named map[int]bool
}

func newTraceFile(path string) (*traceFile, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("observe: creating the trace file: %w", err)
	}
	t := &traceFile{path: path, f: f, w: bufio.NewWriterSize(f, 256<<10), named: map[int]bool{}}
	_, _ = t.w.WriteString("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n")
	return t, nil
}

// add writes a batch of rank's spans, a JSON array as the rank sent it.
// The spans pass through undecoded, each with the rank as its PID (the
// rank's tracer sets it): decoding them, only to encode them again,
// would cost the launcher more than everything else it does for a step,
// on cores the workers need. The hub names the rank's tracks itself,
// once.
func (t *traceFile) add(rank int, spans json.RawMessage) {
	inner := bytes.TrimSpace(spans)
	if len(inner) < 2 || inner[0] != '[' || inner[len(inner)-1] != ']' {
		return
	}
	inner = bytes.TrimSpace(inner[1 : len(inner)-1])
	if len(inner) == 0 {
		return
	}
	if !t.named[rank] {
		t.named[rank] = true
		for _, e := range event.TrackNames(rank) {
			t.write(&e)
		}
	}
	if t.n > 0 {
		_ = t.w.WriteByte(',')
	}
	t.n++
	_, _ = t.w.Write(inner)
	_ = t.w.WriteByte('\n')
}

// write adds one event to the file.
func (t *traceFile) write(e any) {
	b, err := json.Marshal(e)
	if err != nil {
		return
	}
	if t.n > 0 {
		_ = t.w.WriteByte(',')
	}
	t.n++
	_, _ = t.w.Write(b)
	_ = t.w.WriteByte('\n')
}

func (t *traceFile) close() error {
	_, _ = t.w.WriteString("]}\n")
	err := t.w.Flush()
	if cerr := t.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", t.path, err)
	}
	return nil
}
