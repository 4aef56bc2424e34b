package observe

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	"github.com/gotrain/gotrain/metrics"
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

// span is a metrics.TraceEvent whose arguments stay encoded: the hub
// passes them through, and decoding them into maps would cost it more
// than all the rest of a span.
type span struct {
	Name string          `json:"name"`
	Cat  string          `json:"cat,omitempty"`
	Ph   string          `json:"ph"`
	TS   float64         `json:"ts"`
	Dur  float64         `json:"dur,omitempty"`
	PID  int             `json:"pid"`
	TID  int             `json:"tid"`
	Args json.RawMessage `json:"args,omitempty"`
}

// add writes rank's spans; the hub's events are never concurrent.
func (t *traceFile) add(rank int, spans []span) {
	if !t.named[rank] {
		t.named[rank] = true
		for _, e := range metrics.TrackNames(rank) {
			t.write(&e)
		}
	}
	for i := range spans {
		if spans[i].Ph != "M" { // the hub names the tracks itself, once
			t.write(&spans[i])
		}
	}
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
