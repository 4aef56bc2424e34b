package observe

import (
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"slices"
	"time"
)

// web holds the dashboard: one page of hand-written HTML, CSS and JS that
// draws SVG, so the binary serves everything and no network is needed.
//
//go:embed web
var web embed.FS

// State is what the dashboard's page polls: the job and, per rank, its
// identity, last row and the curves' points.
type State struct {
	RunID   string      `json:"run_id"`
	Node    string      `json:"node"`
	State   string      `json:"state"`
	Ranks   int         `json:"ranks"` // expected
	Uptime  float64     `json:"uptime_s"`
	Version int         `json:"version"`
	Workers []rankState `json:"workers"`
	// Series are per rank: each point [step, unix time, loss,
	// samples/s, step ms, exposed wait ms].
	Series map[int][][6]float64 `json:"series"`
}

// Snapshot returns the job's state as the dashboard shows it.
func (h *Hub) Snapshot() State {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := State{RunID: h.opt.RunID, Node: h.opt.Node, State: h.state, Ranks: h.opt.Ranks,
		Uptime: time.Since(h.started).Seconds(), Version: h.version, Series: map[int][][6]float64{}}
	for _, rs := range h.ranks {
		st.Workers = append(st.Workers, *rs)
		pts := make([][6]float64, len(rs.History))
		for i, r := range rs.History {
			pts[i] = [6]float64{float64(r.Step), r.Time, r.Loss, r.SamplesPerSec, r.StepMS, r.ExposedWaitMS}
		}
		st.Series[rs.Rank] = pts
	}
	slices.SortFunc(st.Workers, func(a, b rankState) int { return a.Rank - b.Rank })
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
