package observe

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gotrain/gotrain/event"
)

// promMetrics are the job's Prometheus series, in a registry of their
// own (not the process's default one: a library user's launcher may
// serve its own).
type promMetrics struct {
	reg                  *prometheus.Registry
	runID, node          string
	nodeOf               func(rank int) string
	step, phase, sps     *prometheus.GaugeVec
	exposed, loss, lr    *prometheus.GaugeVec
	restart              *prometheus.GaugeVec
	steps, samples, sent *prometheus.CounterVec
}

func newPromMetrics(runID, node string, nodeOf func(int) string) *promMetrics {
	l := []string{"run_id", "node", "rank"}
	gauge := func(name, help string, extra ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gotrain_" + name, Help: help}, append(l[:3:3], extra...))
	}
	counter := func(name, help string, extra ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gotrain_" + name, Help: help}, append(l[:3:3], extra...))
	}
	p := &promMetrics{reg: prometheus.NewRegistry(), runID: runID, node: node, nodeOf: nodeOf,
		step:    gauge("step_seconds", "Time of the rank's last step (data, forward, backward, optimizer)."),
		phase:   gauge("step_phase_seconds", "Time of each phase of the rank's last step.", "phase"),
		sps:     gauge("samples_per_second", "The rank's samples per second over its last step."),
		exposed: gauge("exposed_allreduce_wait_seconds", "Gradient allreduce wait not hidden by backward in the rank's last step."),
		loss:    gauge("loss", "The rank's loss at its last step."),
		lr:      gauge("learning_rate", "The learning rate at the rank's last step."),
		restart: gauge("restarts", "How many times the launcher has restarted the job, as the rank last reported."),
		steps:   counter("steps_total", "Steps the rank has taken."),
		samples: counter("samples_total", "Samples the rank has processed."),
		sent:    counter("bytes_sent_total", "Payload bytes the rank has sent to each peer.", "peer"),
	}
	p.reg.MustRegister(p.step, p.phase, p.sps, p.exposed, p.loss, p.lr, p.restart, p.steps, p.samples, p.sent)
	return p
}

func (p *promMetrics) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(p.reg, promhttp.HandlerOpts{}))
	return mux
}

func (p *promMetrics) labels(rank int) prometheus.Labels {
	node := p.node
	if p.nodeOf != nil {
		node = p.nodeOf(rank)
	}
	return prometheus.Labels{"run_id": p.runID, "node": node, "rank": strconv.Itoa(rank)}
}

// observe updates the series from one row.
func (p *promMetrics) observe(r event.Row) {
	l := p.labels(r.Rank)
	p.step.With(l).Set(r.StepMS / 1e3)
	for name, v := range map[string]float64{"data": r.DataMS, "forward": r.ForwardMS, "backward": r.BackwardMS,
		"exposed_allreduce_wait": r.ExposedWaitMS, "optimizer": r.OptimizerMS} {
		p.phase.MustCurryWith(l).WithLabelValues(name).Set(v / 1e3)
	}
	p.sps.With(l).Set(r.SamplesPerSec)
	p.exposed.With(l).Set(r.ExposedWaitMS / 1e3)
	p.loss.With(l).Set(r.Loss)
	p.lr.With(l).Set(r.LR)
	p.restart.With(l).Set(float64(r.Restart))
	p.steps.With(l).Add(float64(r.Steps))
	p.samples.With(l).Add(float64(r.Samples))
	for peer, b := range r.BytesSent {
		if b > 0 {
			p.sent.MustCurryWith(l).WithLabelValues(peer).Add(float64(b))
		}
	}
}

// restarts sets a rank's restart count from its hello.
func (p *promMetrics) restarts(rank, n int) { p.restart.With(p.labels(rank)).Set(float64(n)) }
