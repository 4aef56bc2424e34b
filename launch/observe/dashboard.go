package observe

import (
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"slices"
	"time"

	"github.com/gotrain/gotrain/event"
)

// web holds the dashboard: one page of hand-written HTML, CSS and JS that
// draws SVG, so the binary serves everything and no network is needed.
//
//go:embed web
var web embed.FS

// State is what the dashboard's page polls: the job and, per rank, its
// identity, last row and the curves' points.
type State struct {
	RunID   string  `json:"run_id"`
	Node    string  `json:"node"`
	State   string  `json:"state"`
	Ranks   int     `json:"ranks"` // expected
	Uptime  float64 `json:"uptime_s"`
	Version int     `json:"version"`
	// Ended says the job is over (State finished or failed): the page
	// shows its last state, which the launcher serves until it exits.
	Ended    bool        `json:"ended"`
	Workers  []rankState `json:"workers"`
	Progress Progress    `json:"progress"`
	// Replicas is a fault-tolerant job's membership, once it changed.
	Replicas *Replicas `json:"replicas,omitempty"`
	// Series are per rank: each point [step, unix time, loss,
	// samples/s (or tokens/s), step ms, exposed wait ms, learning rate],
	// null for a number that is not finite (a NaN loss).
	Series map[int][][7]event.Float `json:"series"`
}

// Snapshot returns the job's state as the dashboard shows it.
func (h *Hub) Snapshot() State {
	h.mu.Lock()
	defer h.mu.Unlock()
	end := time.Now()
	if !h.ended.IsZero() {
		end = h.ended
	}
	st := State{RunID: h.opt.RunID, Node: h.opt.Node, State: h.state, Ranks: h.opt.Ranks,
		Uptime: end.Sub(h.started).Seconds(), Version: h.version, Ended: !h.ended.IsZero(),
		Progress: h.progress.snapshot(), Replicas: h.replicasSnapshot(), Series: map[int][][7]event.Float{}}
	for _, rs := range h.ranks {
		st.Workers = append(st.Workers, *rs)
		pts := make([][7]event.Float, len(rs.History))
		for i, r := range rs.History {
			pts[i] = [7]event.Float{event.Float(r.Step), event.Float(r.Time), event.Float(r.Loss),
				event.Float(r.SamplesPerSec), event.Float(r.StepMS), event.Float(r.ExposedWaitMS), event.Float(r.LR)}
		}
		st.Series[rs.Rank] = pts
	}
	slices.SortFunc(st.Workers, func(a, b rankState) int { return a.Rank - b.Rank })
	if h.progress.unit == "" { // a program that reports no progress: the rows say
		for _, w := range st.Workers {
			if w.Last != nil && w.Last.Unit != "" {
				st.Progress.Unit = w.Last.Unit
			}
		}
	}
	return st
}

func (h *Hub) dashboardHandler() http.Handler {
	mux := http.NewServeMux()
	sub, err := fs.Sub(web, "web")
	if err != nil {
		panic("observe: the embedded dashboard is missing: " + err.Error())
	}
	mux.Handle("/", http.FileServerFS(sub))
	mux.HandleFunc("/api/state", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(h.Snapshot())
	})
	return mux
}
