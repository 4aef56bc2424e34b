package mnistjob

import (
	"testing"
)

// TestMemoryEstimate checks the estimate against the peak RSS of runs of
// the job (fp32, one worker): the estimate may be above a run's peak,
// not far below it.
func TestMemoryEstimate(t *testing.T) {
	for _, tc := range []struct {
		cfg      Config
		measured float64 // MiB
	}{{Config{}, 164}, {Config{BatchSize: 8192}, 353}, {Config{Model: "cnn"}, 315}, {Config{Model: "cnn", BatchSize: 1024}, 945}} {
		got := float64(tc.cfg.MemoryEstimate().Bytes) / (1 << 20)
		if got < 0.95*tc.measured || got > 1.5*tc.measured {
			t.Errorf("%+v: estimate %.0f MiB, measured %.0f MiB", tc.cfg, got, tc.measured)
		}
	}
}

func TestMemoryEstimateHugeBatch(t *testing.T) {
	m := Config{BatchSize: 100000000}.MemoryEstimate()
	if m.Flag != "batch-size" || m.Value != 100000000 || m.Bytes < 500<<30 {
		t.Errorf("estimate %+v, want over 500 GiB naming --batch-size", m)
	}
}
