package gptjob

import (
	"fmt"

	"github.com/gotrain/gotrain/metrics"
)

// openMetrics starts the metrics recorder if the job writes metrics or a
// trace, or its launcher collects them (event.EnvObserve).
func (m *meter) openMetrics(j *job) error {
	m.opt = j.opt
	rec, err := metrics.New(metrics.Config{File: j.cfg.Metrics, Trace: j.cfg.Trace, Every: j.cfg.MetricsEvery,
		Rank: j.rank, Group: j.pg, Model: j.dm, Reporter: m.rep})
	if err != nil {
		return fmt.Errorf("gptjob: %w", err)
	}
	if !rec.Active() {
		_ = rec.Close() // records nowhere: spare the loop its clock reads
		return nil
	}
	m.rec = rec
	return nil
}

// closeMetrics flushes the metrics and the trace and returns the first
// error recording them.
func (m *meter) closeMetrics() error {
	if m.rec == nil {
		return nil
	}
	err := m.rec.Close()
	m.rec, m.recSt = nil, nil
	if m.recErr != nil {
		err = m.recErr
	}
	if err != nil {
		return fmt.Errorf("gptjob: %w", err)
	}
	return nil
}
