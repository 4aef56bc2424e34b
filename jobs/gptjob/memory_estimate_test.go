package gptjob

import (
	"testing"
)

// TestMemoryEstimate checks the estimate against the peak RSS of runs of
// the job (fp32, one worker, one step): 255 MiB for the defaults, 932
// MiB with --block-size 512 and 931 MiB with --batch-size 128. The
// estimate may be above a run's peak, not far below it.
func TestMemoryEstimate(t *testing.T) {
	for _, tc := range []struct {
		cfg      Config
		measured float64 // MiB
	}{{Config{}, 255}, {Config{BlockSize: 512}, 932}, {Config{BatchSize: 128}, 931}, {Config{NEmbd: 256}, 473}, {Config{NLayer: 8}, 444}} {
		got := float64(tc.cfg.MemoryEstimate().Bytes) / (1 << 20)
		if got < 0.95*tc.measured || got > 1.5*tc.measured {
			t.Errorf("%+v: estimate %.0f MiB, measured %.0f MiB", tc.cfg, got, tc.measured)
		}
	}
}

// TestMemoryEstimateNamesFlag: the flag named is the size that makes the
// estimate large.
func TestMemoryEstimateNamesFlag(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		flag string
	}{
		{Config{NEmbd: 100000, NHead: 1}, "n-embd"},
		{Config{BlockSize: 100000000}, "block-size"},
		{Config{BatchSize: 100000000}, "batch-size"},
		{Config{NLayer: 100000}, "n-layer"},
		{Config{NLayer: 100, BatchSize: 1 << 20}, "batch-size"},
	} {
		m := tc.cfg.MemoryEstimate()
		if m.Flag != tc.flag || m.Bytes < 100<<30 {
			t.Errorf("%+v: %+v, want over 100 GiB naming --%s", tc.cfg, m, tc.flag)
		}
	}
}
