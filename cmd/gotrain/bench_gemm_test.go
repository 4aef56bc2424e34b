package main

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBenchGemmBound runs `gotrain bench gemm` briefly and checks its last
// lines: the CNN's and the GPT's GEMM work per step (fixed by the models)
// and bounds consistent with the measured times.
func TestBenchGemmBound(t *testing.T) {
	for _, precision := range []string{"fp32", "bf16-emulated"} {
		out, _, code := runGotrain(t, 60*time.Second, "bench", "gemm", "--min-time", "1ms", "--threads", "1", "--precision", precision)
		if code != 0 {
			t.Fatalf("bench gemm --precision %s: exit %d:\n%s", precision, code, out)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != len(gemmCases)+2 {
			t.Fatalf("bench gemm: %d lines, want %d:\n%s", len(lines), len(gemmCases)+2, out)
		}
		// The GEMM work is fixed by each model: 4.580 GFLOP for 64 images;
		// 4·(3+1+4+4)·2·4096·128²·3 + 2·4096·256·128·3 + 6·256·2·128²·32
		// = 21.743 GFLOP for 4096 tokens.
		for i, want := range []struct {
			step, gflop, unit string
			per               float64
		}{
			{"cnn", "4.580", "samples", 64}, {"gpt", "21.743", "tokens", 4096}} {
			line := lines[len(lines)-2+i]
			m := regexp.MustCompile(`^step=(\S+) precision=(\S+) gflop_per_step=([0-9.]+) gemm_seconds_per_step=([0-9.]+) bound_` + want.unit + `_per_s=([0-9]+)$`).FindStringSubmatch(line)
			if m == nil {
				t.Fatalf("bench gemm: line %q", line)
			}
			if m[1] != want.step || m[2] != precision || m[3] != want.gflop {
				t.Errorf("bench gemm: %q, want step %s, precision %s and %s GFLOP per step", line, want.step, precision, want.gflop)
			}
			// The bound is the work over the time, each printed rounded: their
			// product is the work within what the rounding allows.
			secs, _ := strconv.ParseFloat(m[4], 64)
			bound, _ := strconv.ParseFloat(m[5], 64)
			if secs <= 0 || bound <= 0 || math.Abs(bound*secs/want.per-1) > halfUnit(m[4])/secs+halfUnit(m[5])/bound+1e-9 {
				t.Errorf("bench gemm: bound %v %s/s inconsistent with %v s per step of %v", bound, want.unit, secs, want.per)
			}
		}
	}
}
