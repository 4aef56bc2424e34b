// Package observe is the launcher's side of a job's metrics: it takes the
// rows, spans and worker hellos the workers send over their events pipes
// (the records of package event, which package metrics sends), and
// writes the merged metrics file and trace, serves Prometheus's /metrics,
// serves the live dashboard, and forwards SIGUSR1 to the workers so that
// they dump their flight recorders. It links no tensor code.
package observe

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gotrain/gotrain/event"
)

// Options say what the hub does; the zero value does nothing but keep
// the job's state.
type Options struct {
	RunID string // the run_id label
	Node  string // the node label (the launcher's node rank)
	// NodeOf, if set, gives each rank's node label instead (a launcher
	// that starts ranks on several nodes).
	NodeOf func(rank int) string
	Ranks  int // the ranks this launcher starts (for the dashboard)

	MetricsFile   string // write every rank's rows here ("" for none)
	TraceFile     string // write the merged timeline here ("" for none)
	MetricsAddr   string // serve Prometheus /metrics here ("" for none)
	DashboardAddr string // serve the dashboard here ("" for none)
	// FlightDir is the workers' GOTRAIN_FLIGHT_DIR: with one, SIGUSR1 to
	// the launcher is forwarded to them (without, it would kill them).
	FlightDir string
	Logger    *slog.Logger
}

// historyLen is how many rows per rank the dashboard keeps.
const historyLen = 2000

// Hub collects the workers' reports.
type Hub struct {
	opt   Options
	log   *slog.Logger
	prom  *promMetrics
	trace *traceFile

	mu       sync.Mutex
	rows     *bufio.Writer
	rowFile  *os.File
	ranks    map[int]*rankState
	started  time.Time
	ended    time.Time // when SetState gave the job's end; zero before
	state    string
	version  int // bumped by each row and progress event, for the dashboard's polling
	progress progressState
	replicas *Replicas // a fault-tolerant job's membership, once it changed
	errs     []error

	servers []*http.Server
	addrs   map[string]string // "metrics"/"dashboard" -> bound address
	stopSig func()
}

// rankState is what the hub knows of one rank.
type rankState struct {
	Rank    int         `json:"rank"`
	Host    string      `json:"host"`
	PID     int         `json:"pid"`
	Restart int         `json:"restart"`
	Last    *event.Row  `json:"last"`
	History []event.Row `json:"-"`
	bytes   map[string]int64
}

// New starts the hub's files and servers; its errors name the flag's
// value that failed (a file, an address).
func New(opt Options) (*Hub, error) {
	h := &Hub{opt: opt, log: opt.Logger, ranks: map[int]*rankState{}, started: time.Now(),
		state: "starting", addrs: map[string]string{}}
	if h.log == nil {
		h.log = slog.Default()
	}
	if opt.MetricsFile != "" {
		f, err := os.Create(opt.MetricsFile)
		if err != nil {
			return nil, fmt.Errorf("observe: creating the metrics file: %w", err)
		}
		h.rowFile, h.rows = f, bufio.NewWriterSize(f, 64<<10)
	}
	if opt.TraceFile != "" {
		t, err := newTraceFile(opt.TraceFile)
		if err != nil {
			h.Close()
			return nil, err
		}
		h.trace = t
	}
	if opt.MetricsAddr != "" {
		h.prom = newPromMetrics(opt.RunID, opt.Node, opt.NodeOf)
		if err := h.serve("metrics", "/metrics", opt.MetricsAddr, h.prom.handler()); err != nil {
			h.Close()
			return nil, err
		}
	}
	if opt.DashboardAddr != "" {
		if err := h.serve("dashboard", "/", opt.DashboardAddr, h.dashboardHandler()); err != nil {
			h.Close()
			return nil, err
		}
	}
	if opt.FlightDir != "" {
		h.forwardSIGUSR1()
	}
	return h, nil
}

// serve listens on addr and serves handler there until Close; the log
// line names the page at path.
func (h *Hub) serve(what, path, addr string, handler http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("observe: %s address: %w", what, err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	h.servers = append(h.servers, srv)
	h.addrs[what] = ln.Addr().String()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			h.log.Warn("observe: server stopped", "what", what, "err", err)
		}
	}()
	h.log.Info("serving "+what, "addr", "http://"+ln.Addr().String()+path)
	return nil
}

// Addr returns the address the "metrics" or "dashboard" server listens
// on ("" if none), for a flag given with port 0.
func (h *Hub) Addr(what string) string { return h.addrs[what] }

// Env returns the variables the workers need to send what the hub uses.
func (h *Hub) Env() []string {
	var env []string
	if h.opt.FlightDir != "" {
		env = append(env, "GOTRAIN_FLIGHT_DIR="+h.opt.FlightDir)
	}
	want := []string{"hello"}
	if h.rows != nil || h.prom != nil || h.opt.DashboardAddr != "" {
		want = append(want, "rows")
	}
	if h.rows != nil {
		want = append(want, "file")
	}
	if h.trace != nil {
		want = append(want, "trace")
	}
	return append(env, event.EnvObserve+"="+strings.Join(want, ","))
}

// Wrap returns an events function that feeds the hub, then next (the
// console), with each event.
func (h *Hub) Wrap(next func(rank int, line []byte)) func(rank int, line []byte) {
	return func(rank int, line []byte) {
		h.Event(rank, line)
		if next != nil {
			next(rank, line)
		}
	}
}

// Event takes one event line from rank's pipe; lines of other kinds, or
// not events at all, are ignored. Each line is decoded once, into the
// type its kind names.
func (h *Hub) Event(rank int, line []byte) {
	switch event.KindOf(line) {
	case event.KindRow:
		var ev struct{ Data []event.Row }
		if json.Unmarshal(line, &ev) != nil {
			return
		}
		h.mu.Lock()
		for _, row := range ev.Data {
			row.Rank = rank // a rank's rows are its own, whatever they claim
			h.row(row)
		}
		h.mu.Unlock()
	case event.KindTrace:
		var ev struct{ Data json.RawMessage } // checked as JSON, passed through
		if json.Unmarshal(line, &ev) != nil {
			return
		}
		h.mu.Lock()
		if h.trace != nil {
			h.trace.add(rank, ev.Data)
		}
		h.mu.Unlock()
	case event.KindEpoch, event.KindStep, event.KindDone:
		var ev event.Event
		if json.Unmarshal(line, &ev) != nil {
			return
		}
		h.mu.Lock()
		h.progressEvent(rank, &ev)
		h.mu.Unlock()
	case event.KindReplicas:
		h.replicasEvent(line)
	case event.KindHello:
		var ev struct{ Data *event.Hello }
		if json.Unmarshal(line, &ev) != nil || ev.Data == nil {
			return
		}
		hello := ev.Data
		h.mu.Lock()
		rs := h.rank(rank)
		rs.Host, rs.PID, rs.Restart = hello.Host, hello.PID, hello.Restart
		h.state = "running"
		h.mu.Unlock()
		if h.prom != nil {
			h.prom.restarts(rank, hello.Restart)
		}
	}
}

// rank returns rank's state, made on first use; h.mu is held.
func (h *Hub) rank(r int) *rankState {
	rs := h.ranks[r]
	if rs == nil {
		rs = &rankState{Rank: r, bytes: map[string]int64{}}
		h.ranks[r] = rs
	}
	return rs
}

// row records one metrics row of a rank; h.mu is held.
func (h *Hub) row(row event.Row) {
	rs := h.rank(row.Rank)
	rs.Last = &row
	rs.Restart = row.Restart
	if len(rs.History) >= historyLen {
		// Keep every other row of the older half: the curve's shape
		// stays, its memory bounded.
		old := rs.History[:historyLen/2]
		kept := old[:0]
		for i := 0; i < len(old); i += 2 {
			kept = append(kept, old[i])
		}
		rs.History = append(kept, rs.History[historyLen/2:]...)
	}
	rs.History = append(rs.History, row)
	h.state = "running"
	h.version++
	if h.rows != nil {
		b, err := json.Marshal(row)
		if err == nil {
			_, _ = h.rows.Write(append(b, '\n'))
		}
	}
	if h.prom != nil {
		h.prom.observe(row)
	}
}

// The states of a job that has ended, which SetState takes.
const (
	StateFinished = "finished"
	StateFailed   = "failed"
)

// SetState sets the job's state the dashboard shows ("running",
// "restarting", StateFinished or StateFailed; the last two end its
// clock).
func (h *Hub) SetState(s string) {
	h.mu.Lock()
	h.state = s
	if s == StateFinished || s == StateFailed {
		h.ended = time.Now()
	}
	h.version++
	h.mu.Unlock()
}

// Close stops the servers and writes out the files; its error is the
// files'.
func (h *Hub) Close() error {
	if h.stopSig != nil {
		h.stopSig()
		h.stopSig = nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, s := range h.servers {
		_ = s.Shutdown(ctx)
	}
	h.servers = nil
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.rows != nil {
		h.errs = append(h.errs, h.rows.Flush(), h.rowFile.Close())
		h.rows = nil
	}
	if h.trace != nil {
		h.errs = append(h.errs, h.trace.close())
		h.trace = nil
	}
	if err := errors.Join(h.errs...); err != nil {
		return fmt.Errorf("observe: %w", err)
	}
	return nil
}

// pids returns the workers' process ids the hub has heard of.
func (h *Hub) pids() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []int
	for _, rs := range h.ranks {
		if rs.PID > 0 {
			out = append(out, rs.PID)
		}
	}
	slices.Sort(out)
	return out
}
