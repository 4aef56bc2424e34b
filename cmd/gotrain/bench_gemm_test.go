package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBenchGemmBound runs `gotrain bench gemm` briefly and checks its last
// line: the CNN step's GEMM work (fixed by the model) and a bound
// consistent with the measured time.
func TestBenchGemmBound(t *testing.T) {
	for _, precision := range []string{"fp32", "bf16-emulated"} {
		out, _, code := runGotrain(t, 60*time.Second, "bench", "gemm", "--min-time", "1ms", "--threads", "1", "--precision", precision)
		if code != 0 {
			t.Fatalf("bench gemm --precision %s: exit %d:\n%s", precision, code, out)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != len(gemmCases)+1 {
			t.Fatalf("bench gemm: %d lines, want %d:\n%s", len(lines), len(gemmCases)+1, out)
		}
		m := regexp.MustCompile(`^step=cnn precision=(\S+) gflop_per_step=([0-9.]+) gemm_seconds_per_step=([0-9.]+) bound_samples_per_s=([0-9]+)$`).FindStringSubmatch(lines[len(lines)-1])
		if m == nil {
			t.Fatalf("bench gemm: last line %q", lines[len(lines)-1])
		}
		if m[1] != precision || m[2] != "4.580" {
			t.Errorf("bench gemm: %q, want precision %s and 4.580 GFLOP per step", lines[len(lines)-1], precision)
		}
		secs, _ := strconv.ParseFloat(m[3], 64)
		bound, _ := strconv.ParseFloat(m[4], 64)
		if secs <= 0 || bound <= 0 || bound*secs < 63 || bound*secs > 65 {
			t.Errorf("bench gemm: bound %v samples/s inconsistent with %v s per 64-sample step", bound, secs)
		}
	}
}
