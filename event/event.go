// Package event defines what a worker reports to its launcher: the
// records written as JSON lines on the events pipe (progress bars, metric
// rows, trace spans, who the worker is, the run's summary) and the
// variables that set the pipe up. It imports only the standard library, so that the programs
// rendering these records (the launcher's console, its metrics files,
// Prometheus and dashboard servers) link no tensor code.
package event

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// EnvFD names the environment variable holding the descriptor of the
// launcher's events pipe.
const EnvFD = "GOTRAIN_EVENTS_FD"

// EnvObserve names the variable a launcher sets for the workers whose
// reports it collects: a comma-separated list of "hello" (say who the
// worker is), "rows" (send every row), "file" (the launcher writes the
// metrics file: metrics.Config.File is not written)) and "trace" (send the
// timeline's spans, which the launcher writes, instead of metrics.Config.Trace).
const EnvObserve = "GOTRAIN_OBSERVE"

// EnvSummary names the variable a launcher sets (to "1") for the workers
// whose summary it prints itself, as `gotrain train` does: rank 0 then
// sends its summary as an event of KindSummary instead of printing it.
const EnvSummary = "GOTRAIN_SUMMARY"

// The kinds of Event. A progress bar sends the first three, which the
// launcher's display draws; a program sends the others with
// progress.Reporter.Emit, their payload in Data.
const (
	KindEpoch   = "epoch"   // a bar started
	KindStep    = "step"    // a bar advanced
	KindDone    = "done"    // a bar ended
	KindRow     = "metrics" // Data is a JSON array of Rows, in step order
	KindTrace   = "trace"   // Data is a []TraceEvent
	KindHello   = "worker"  // Data is a Hello, a worker's first event
	KindSummary = "summary" // Data is a Summary, rank 0's last event
)

// Row is one line of the metrics file: a step, or the mean of Every steps
// (times are then means per step, Samples and BytesSent sums).
type Row struct {
	Time    float64 `json:"time"`  // unix seconds at the step's end
	Start   float64 `json:"start"` // unix seconds at the start of its data phase
	Rank    int     `json:"rank"`
	Restart int     `json:"restart"` // the launcher's restart count
	Epoch   int     `json:"epoch"`   // counting from 1
	Step    int     `json:"step"`    // this run's steps so far, counting from 1
	Steps   int     `json:"steps"`   // how many steps the row covers
	// Loss is the mean loss of the row's steps: NaN (null in JSON, see
	// Float) if one of them was not finite.
	Loss    float64 `json:"loss"`
	LR      float64 `json:"lr"`
	Samples int     `json:"samples"`
	// Unit is what Samples counts: "samples" (or "") or "tokens".
	Unit string `json:"unit,omitempty"`
	// SamplesPerSec is this rank's samples (or tokens) over its step time.
	SamplesPerSec float64 `json:"samples_per_s"`
	StepMS        float64 `json:"step_ms"` // data + forward + backward + optimizer
	DataMS        float64 `json:"data_ms"`
	ForwardMS     float64 `json:"forward_ms"`
	BackwardMS    float64 `json:"backward_ms"`
	// ExposedWaitMS is the part of backward spent waiting for gradient
	// allreduce that computation did not hide.
	ExposedWaitMS float64 `json:"exposed_wait_ms"`
	OptimizerMS   float64 `json:"optimizer_ms"`
	// AllReduceMS is all the time the reductions took, hidden or not.
	AllReduceMS float64 `json:"allreduce_ms"`
	// BytesSent is the payload sent to each peer (by rank) in the row's
	// steps.
	BytesSent map[string]int64 `json:"bytes_sent,omitempty"`
}

// Event is one report, written as one JSON line. A bar sends "epoch" when
// it starts, "step" at most every 100 ms (and for its first and last step)
// and "done" at its end.
type Event struct {
	Kind   string `json:"kind"`             // KindEpoch, KindStep, KindDone or one Emit sends
	Rank   int    `json:"rank"`             // the reporting rank
	Epoch  int    `json:"epoch"`            // counting from 1
	Epochs int    `json:"epochs,omitempty"` // in the run
	Steps  int    `json:"steps,omitempty"`  // in the epoch, 0 if unknown
	Step   int    `json:"step,omitempty"`   // steps done in the epoch
	// Samples is how many samples (or tokens) this rank has processed in
	// the epoch, and Elapsed the seconds from the epoch's start to the
	// last step: the launcher sums Samples/Elapsed over ranks.
	Samples int64   `json:"samples,omitempty"`
	Unit    string  `json:"unit,omitempty"` // "samples" (or "") or "tokens"
	Elapsed float64 `json:"elapsed,omitempty"`
	// Loss is the mean loss of the epoch's steps so far (at "done", the
	// epoch's training loss).
	Loss *float64 `json:"loss,omitempty"`
	// StepTime is the mean seconds per step since the last report.
	StepTime float64            `json:"step_time,omitempty"`
	Metrics  map[string]float64 `json:"metrics,omitempty"` // at "done": test accuracy and the like
	// Names are the Metrics' names in the order the program gave them.
	Names []string `json:"names,omitempty"`
	// Label is what a bar counts: "epoch" (or "") or "eval", an
	// evaluation interval of a run that evaluates every so many steps.
	Label string `json:"label,omitempty"`
	// Rate is this rank's samples (or tokens) per second over the bar's
	// steps after its first (whose time holds the start-up, or the data
	// fetched after an evaluation); 0 until a second step.
	Rate float64 `json:"rate,omitempty"`
	// RunStep and RunSteps are the run's steps done (counting those
	// before a resume) and in all (0 if unknown).
	RunStep  int `json:"run_step,omitempty"`
	RunSteps int `json:"run_steps,omitempty"`
	// ETA is this rank's estimate of the seconds left in the run: the
	// steps left at the run's mean wall time per step since its first
	// step (evaluations and checkpoints included); 0 if unknown.
	ETA float64 `json:"eta,omitempty"`
	// Data is the payload of the other kinds a program sends with Emit
	// (package metrics: "metrics" rows, "trace" spans).
	Data json.RawMessage `json:"data,omitempty"`
}

// Hello tells the launcher who a worker is, so that it can show the job's
// hosts and restarts and forward signals to it.
type Hello struct {
	Rank    int    `json:"rank"`
	Host    string `json:"host"`
	PID     int    `json:"pid"`
	Restart int    `json:"restart"`
}

// Summary is a run's result as rank 0 reports it once training is over:
// the fields of its one-line summary, in order, and any text to show
// before that line (a sample of generated text). A launcher that prints
// the summary itself (see EnvSummary) prints Text, then Line, last.
type Summary struct {
	Fields []Field `json:"fields"`
	Text   string  `json:"text,omitempty"`
}

// Field is one key=value of a Summary, its value formatted as printed.
type Field struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Add appends the field key with value formatted by format (a verb of
// package fmt, such as "%d" or "%.4f").
func (s *Summary) Add(key, format string, value any) {
	s.Fields = append(s.Fields, Field{Key: key, Value: fmt.Sprintf(format, value)})
}

// Line returns the summary line: the fields as key=value, separated by
// spaces, such as "model=mlp world=2 epochs=1".
func (s Summary) Line() string {
	var b strings.Builder
	for i, f := range s.Fields {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(f.Key)
		b.WriteByte('=')
		b.WriteString(f.Value)
	}
	return b.String()
}

// TraceEvent is one Chrome trace event (the JSON object format that
// chrome://tracing and Perfetto read): a complete span ("X": TS and Dur
// in microseconds) or metadata ("M": a track's name). PID is the rank,
// TID the rank's track: TIDCompute, TIDAllReduce or TIDQueue.
type TraceEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`
	TS   float64        `json:"ts"`
	Dur  float64        `json:"dur,omitempty"`
	PID  int            `json:"pid"`
	TID  int            `json:"tid"`
	Args map[string]any `json:"args,omitempty"`
}

// The tracks of a rank.
const (
	TIDCompute   = 0 // steps and their phases, checkpoints
	TIDAllReduce = 1 // each bucket's allreduce while in flight
	TIDQueue     = 2 // each bucket from ready to the start of its allreduce
)

// TrackNames are the metadata events naming rank's tracks.
func TrackNames(rank int) []TraceEvent {
	name := func(tid int, n string) TraceEvent {
		return TraceEvent{Name: "thread_name", Ph: "M", PID: rank, TID: tid, Args: map[string]any{"name": n}}
	}
	return []TraceEvent{
		{Name: "process_name", Ph: "M", PID: rank, Args: map[string]any{"name": "rank " + strconv.Itoa(rank)}},
		{Name: "process_sort_index", Ph: "M", PID: rank, Args: map[string]any{"sort_index": rank}},
		name(TIDCompute, "compute"), name(TIDAllReduce, "allreduce"), name(TIDQueue, "allreduce queue"),
	}
}

// kindPrefix starts every line an Event encodes (Kind is its first
// field).
var kindPrefix = []byte(`{"kind":"`)

// EventKind returns the kind an event line claims ("" if it is not an
// event) without decoding or checking the rest, which the line's consumer
// does: the launcher reads every line of every rank, and most are rows
// and spans that only one consumer wants.
func KindOf(line []byte) string {
	if rest, ok := bytes.CutPrefix(line, kindPrefix); ok {
		if i := bytes.IndexByte(rest, '"'); i >= 0 && bytes.IndexByte(rest[:i], '\\') < 0 {
			return string(rest[:i])
		}
	}
	var ev struct {
		Kind string `json:"kind"`
	}
	if json.Unmarshal(line, &ev) != nil {
		return ""
	}
	return ev.Kind
}
