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

// add writes rank's spans; the hub's events are never concurrent.
func (t *traceFile) add(rank int, spans []metrics.TraceEvent) {
	if !t.named[rank] {
		t.named[rank] = true
		var names []metrics.TraceEvent
		for _, e := range metrics.TrackNames(rank) {
			names = append(names, e)
		}
		t.write(names)
	}
	var keep []metrics.TraceEvent
	for _, e := range spans {
		if e.Ph != "M" { // the hub names the tracks itself, once
			keep = append(keep, e)
		}
	}
	t.write(keep)
}

func (t *traceFile) write(spans []metrics.TraceEvent) {
	for i := range spans {
		b, err := json.Marshal(&spans[i])
		if err != nil {
			continue
		}
		if t.n > 0 {
			_ = t.w.WriteByte(',')
		}
		t.n++
		_, _ = t.w.Write(b)
		_ = t.w.WriteByte('\n')
	}
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
