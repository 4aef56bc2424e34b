package metrics_test

import (
	"path/filepath"
	"testing"

	"github.com/gotrain/gotrain/metrics"
)

// BenchmarkStep is what recording adds to each step, alone (no group or
// DDP model): clock reads, the row's JSON line into the file's buffer,
// and with the trace the step's spans. Compare it with a step's time
// (the MNIST MLP's is about 4 ms per rank on 2 CPUs).
func BenchmarkStep(b *testing.B) {
	for _, tc := range []struct {
		name  string
		trace bool
	}{{"metrics", false}, {"metrics+trace", true}} {
		b.Run(tc.name, func(b *testing.B) {
			dir := b.TempDir()
			cfg := metrics.Config{File: filepath.Join(dir, "m.jsonl")}
			if tc.trace {
				cfg.Trace = filepath.Join(dir, "t.json")
			}
			rec, err := metrics.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				st := rec.Begin()
				st.Forwarded()
				st.Backwarded()
				if err := st.End(64, 0.5, 0.01); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if err := rec.Close(); err != nil {
				b.Fatal(err)
			}
		})
	}
}
