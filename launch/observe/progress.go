package observe

import (
	"maps"
	"slices"

	"github.com/gotrain/gotrain/event"
)

// maxEvals bounds the evaluations the dashboard keeps (a long run that
// evaluates every 100 steps has a few hundred).
const maxEvals = 5000

// progressState is what the dashboard shows of the workers' progress
// events: the run's place, its rate and ETA, and each evaluation.
type progressState struct {
	unit, label   string
	epoch, epochs int
	ranks         map[int]rankProgress
	evals         []Eval
}

// rankProgress is one rank's last progress event.
type rankProgress struct {
	runStep, runSteps int
	rate, eta         float64
	epoch             int
}

// Progress is the run's progress as the dashboard shows it.
type Progress struct {
	Unit   string  `json:"unit"`  // "samples" or "tokens"
	Label  string  `json:"label"` // what a bar counts: "epoch" or "eval"
	Epoch  int     `json:"epoch"` // the current epoch or interval, counting from 1
	Epochs int     `json:"epochs"`
	Step   int     `json:"step"`  // the slowest rank's step of the run
	Steps  int     `json:"steps"` // the run's steps in all; 0 if unknown
	Rate   float64 `json:"rate"`  // the ranks' samples (or tokens) per second
	ETA    float64 `json:"eta_s"` // seconds left in the run (the slowest rank's); 0 if unknown
	Evals  []Eval  `json:"evals"`
}

// Eval is the end of an epoch or evaluation interval: the training loss
// and rank 0's metrics (a validation loss, a learning rate, a test
// accuracy), in the program's order; a NaN is null in JSON.
type Eval struct {
	Epoch     int                    `json:"epoch"`
	Step      int                    `json:"step"` // the run's step it came at
	TrainLoss *event.Float           `json:"train_loss,omitempty"`
	Metrics   map[string]event.Float `json:"metrics,omitempty"`
	Names     []string               `json:"names,omitempty"`
}

// progressEvent takes a progress event of rank; h.mu is held.
func (h *Hub) progressEvent(rank int, ev *event.Event) {
	p := &h.progress
	if p.ranks == nil {
		p.ranks = map[int]rankProgress{}
	}
	if ev.Unit != "" {
		p.unit = ev.Unit
	}
	if ev.Label != "" {
		p.label = ev.Label
	}
	if ev.Epoch >= p.epoch {
		p.epoch, p.epochs = ev.Epoch, ev.Epochs
	}
	rp := p.ranks[rank]
	rp.runStep, rp.runSteps, rp.epoch = ev.RunStep, ev.RunSteps, ev.Epoch
	if ev.Kind != event.KindEpoch {
		rp.rate, rp.eta = ev.Rate, ev.ETA
	}
	p.ranks[rank] = rp
	if ev.Kind == event.KindDone && rank == 0 {
		e := Eval{Epoch: ev.Epoch, Step: ev.RunStep, Names: ev.Names}
		if ev.Loss != nil {
			loss := event.Float(*ev.Loss)
			e.TrainLoss = &loss
		}
		if len(ev.Metrics) > 0 {
			e.Metrics = make(map[string]event.Float, len(ev.Metrics))
			for k, v := range ev.Metrics {
				e.Metrics[k] = event.Float(v)
			}
		}
		if len(p.evals) >= maxEvals {
			p.evals = slices.Delete(p.evals, 0, len(p.evals)-maxEvals+1)
		}
		p.evals = append(p.evals, e)
	}
	if h.ended.IsZero() { // a straggling event does not undo the job's end
		h.state = "running"
	}
	h.version++
}

// snapshot is the progress as the dashboard shows it; h.mu is held.
func (p *progressState) snapshot() Progress {
	out := Progress{Unit: p.unit, Label: p.label, Epoch: p.epoch, Epochs: p.epochs, Evals: slices.Clone(p.evals)}
	if out.Unit == "" {
		out.Unit = "samples" // or the rows' (see Snapshot)
	}
	if out.Label == "" {
		out.Label = "epoch"
	}
	first := true
	for _, r := range slices.Sorted(maps.Keys(p.ranks)) {
		rp := p.ranks[r]
		if first || rp.runStep < out.Step {
			out.Step = rp.runStep
		}
		first = false
		out.Steps = max(out.Steps, rp.runSteps)
		out.Rate += rp.rate
		out.ETA = max(out.ETA, rp.eta)
	}
	if out.Evals == nil {
		out.Evals = []Eval{}
	}
	return out
}
