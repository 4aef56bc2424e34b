package distributed

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/gotrain/gotrain/distributed/internal/transport"
)

// FlightRecorderSize is how many of its last operations a group
// remembers for its flight recorder.
const FlightRecorderSize = 512

// Collective states in a CollectiveRecord.
const (
	StateStarted   = "started"   // running: the rank entered it and waits or moves data
	StateCompleted = "completed" // finished on this rank
	StateFailed    = "failed"    // returned an error on this rank
)

// CollectiveRecord is one operation as this rank's flight recorder saw
// it.
type CollectiveRecord struct {
	Group string `json:"group"` // "" for the default group
	Op    string `json:"op"`    // e.g. "allreduce"
	Seq   uint64 `json:"seq"`   // the operation's sequence number in its group
	DType string `json:"dtype"`
	Count int    `json:"count"`
	Root  int    `json:"root"` // -1 if none
	Peer  int    `json:"peer"` // send/recv peer, or the peer a failure names; -1 if none
	State string `json:"state"`
	// Start and End are unix nanoseconds; End is 0 while it runs.
	Start int64  `json:"start_ns"`
	End   int64  `json:"end_ns,omitempty"`
	Error string `json:"error,omitempty"`
}

// FlightDump is the file a rank's flight recorder writes: its identity,
// why it dumped, and its last operations, oldest first.
type FlightDump struct {
	Rank    int                `json:"rank"`
	World   int                `json:"world"`
	Host    string             `json:"host"`
	PID     int                `json:"pid"`
	Reason  string             `json:"reason"`
	Time    int64              `json:"time_ns"` // when the dump was taken
	Records []CollectiveRecord `json:"records"`
}

// flightSlot is one ring entry, written by the goroutine running its
// operation and read by a dump at any time: every field is atomic, and
// seq is written last (and cleared first), seqlock-style, so a reader can
// tell a torn entry and skip it.
type flightSlot struct {
	seq   atomic.Uint64 // seq+1 of the operation; 0 while being written
	desc  atomic.Pointer[opDesc]
	state atomic.Int32
	start atomic.Int64
	end   atomic.Int64
	peer  atomic.Int64
	err   atomic.Pointer[string]
}

const (
	stStarted int32 = iota + 1
	stCompleted
	stFailed
)

// flightRecorder is a group's ring of its last FlightRecorderSize
// operations: recording one is a few atomic stores, no lock and no
// allocation beyond the operation's own descriptor.
type flightRecorder struct {
	next   atomic.Uint64
	slots  [FlightRecorderSize]flightSlot
	dumped atomic.Bool // the automatic dump on a failure is taken once
}

// begin records that the operation d started and returns its slot.
func (f *flightRecorder) begin(d *opDesc) *flightSlot {
	s := &f.slots[(f.next.Add(1)-1)%FlightRecorderSize]
	s.seq.Store(0)
	cp := *d // not d itself: it would keep the operation's buffers alive
	s.desc.Store(&cp)
	s.start.Store(time.Now().UnixNano())
	s.end.Store(0)
	s.peer.Store(int64(d.peer))
	s.err.Store(nil)
	s.state.Store(stStarted)
	s.seq.Store(d.seq + 1)
	return s
}

// end records the outcome of the operation in s.
func (f *flightRecorder) end(s *flightSlot, err error) {
	s.end.Store(time.Now().UnixNano())
	if err == nil {
		s.state.Store(stCompleted)
		return
	}
	msg := err.Error()
	s.err.Store(&msg)
	var pe *transport.PeerError
	if errors.As(err, &pe) {
		s.peer.Store(int64(pe.Rank))
	}
	s.state.Store(stFailed)
}

// records returns the ring's entries, oldest first, skipping any being
// rewritten while it reads.
func (f *flightRecorder) records(group string) []CollectiveRecord {
	n := f.next.Load()
	first := uint64(0)
	if n > FlightRecorderSize {
		first = n - FlightRecorderSize
	}
	out := make([]CollectiveRecord, 0, n-first)
	for i := first; i < n; i++ {
		s := &f.slots[i%FlightRecorderSize]
		seq := s.seq.Load()
		d := s.desc.Load()
		if seq == 0 || d == nil {
			continue
		}
		r := CollectiveRecord{Group: group, Op: d.kind.String(), Seq: d.seq, DType: d.dt.String(),
			Count: d.count, Root: d.root, Peer: int(s.peer.Load()), Start: s.start.Load(), End: s.end.Load()}
		switch s.state.Load() {
		case stStarted:
			r.State = StateStarted
		case stCompleted:
			r.State = StateCompleted
		default:
			r.State = StateFailed
		}
		if e := s.err.Load(); e != nil {
			r.Error = *e
		}
		if s.seq.Load() != seq || seq != d.seq+1 {
			continue // rewritten meanwhile
		}
		out = append(out, r)
	}
	return out
}

// FlightRecord returns this rank's last operations in the group and its
// subgroups (at most FlightRecorderSize each), oldest first within each
// group: what a dump writes. It is safe to call at any time, also while
// an operation hangs.
func (g *Group) FlightRecord() []CollectiveRecord {
	out := g.flight.records(g.id)
	g.mu.Lock()
	children := append([]*Group(nil), g.children...)
	g.mu.Unlock()
	for _, c := range children {
		out = append(out, c.FlightRecord()...)
	}
	return out
}

// DumpFlightRecorder writes this rank's flight record, with reason, to
// dir/flight_rank<R>.json (replacing an earlier dump, through a temporary
// file) and returns the file's path. `gotrain trace DIR` reads the dumps
// of all ranks and names the ranks that did not reach a collective.
func (g *Group) DumpFlightRecorder(dir, reason string) (string, error) {
	host, _ := os.Hostname()
	d := FlightDump{Rank: g.rank, World: g.size, Host: host, PID: os.Getpid(), Reason: reason,
		Time: time.Now().UnixNano(), Records: g.FlightRecord()}
	b, err := json.MarshalIndent(d, "", " ")
	if err != nil {
		return "", fmt.Errorf("distributed: encoding the flight record: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("distributed: flight recorder directory: %w", err)
	}
	path := filepath.Join(dir, "flight_rank"+strconv.Itoa(g.rank)+".json")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return "", fmt.Errorf("distributed: writing the flight record: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("distributed: writing the flight record: %w", err)
	}
	return path, nil
}

// dumpOnFailure dumps the root group's flight record once, if the config
// names a directory, after an operation of g failed with err.
func (g *Group) dumpOnFailure(err error) {
	root := g
	for root.parent != nil {
		root = root.parent
	}
	if root.cfg.FlightRecorderDir == "" || !root.flight.dumped.CompareAndSwap(false, true) {
		return
	}
	path, derr := root.DumpFlightRecorder(root.cfg.FlightRecorderDir, "operation failed: "+err.Error())
	if derr != nil {
		root.cfg.Logger.Warn("flight recorder dump failed", "rank", g.rank, "err", derr)
		return
	}
	root.cfg.Logger.Info("flight recorder dumped", "rank", g.rank, "file", path)
}

// BytesSent returns the payload bytes this rank has sent to each peer
// of the group through its transport since the group was made, indexed
// by peer rank and appended to dst. An allreduce through the shared-memory
// arena (all ranks on one host) sends nothing; one atomic add per send
// keeps the count.
func (g *Group) BytesSent(dst []int64) []int64 {
	for i := range g.sent {
		dst = append(dst, g.sent[i].Load())
	}
	return dst
}
