package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/cpu"
	"github.com/gotrain/gotrain/internal/testlog"
)

// TestBenchCores runs `gotrain bench cores`: a line per pair of the CPUs
// the process may run on and a summary, or, with one CPU, a refusal
// saying there is no pair; and refuses --rounds 0.
func TestBenchCores(t *testing.T) {
	cpus, err := cpu.Allowed()
	if err != nil {
		t.Fatal(err)
	}
	combined, stdout, code := runGotrain(t, 120*time.Second, "bench", "cores", "--rounds", "200")
	if len(cpus) < 2 {
		if code != exitFailure || !strings.Contains(combined, "there is no pair to measure") {
			t.Fatalf("bench cores on one CPU: exit %d, output %q; want exit %d saying there is no pair", code, combined, exitFailure)
		}
		return
	}
	if code != 0 {
		t.Fatalf("bench cores: exit %d:\n%s", code, combined)
	}
	pairs := len(cpus) * (len(cpus) - 1) / 2
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != pairs+1 {
		t.Fatalf("bench cores: %d lines, want %d pairs and a summary:\n%s", len(lines), pairs, stdout)
	}
	pair := regexp.MustCompile(`^cpu_a=(\d+) cpu_b=(\d+) round_trip_ns=\d+$`)
	i := 0
	for ia, a := range cpus {
		for _, b := range cpus[ia+1:] {
			m := pair.FindStringSubmatch(lines[i])
			if m == nil || m[1] != fmt.Sprint(a) || m[2] != fmt.Sprint(b) {
				t.Errorf("bench cores line %d = %q, want cpu_a=%d cpu_b=%d round_trip_ns=N", i, lines[i], a, b)
			}
			i++
		}
	}
	if !regexp.MustCompile(fmt.Sprintf(`^pairs=%d min_ns=\d+ max_ns=\d+ spread=\d+\.\d\d$`, pairs)).MatchString(lines[pairs]) {
		t.Errorf("bench cores summary = %q, want pairs=%d min_ns= max_ns= spread=", lines[pairs], pairs)
	}
	combined, _, code = runGotrain(t, 60*time.Second, "bench", "cores", "--rounds", "0")
	if code != exitUsage || !strings.Contains(combined, "--rounds 0: must be at least 1") {
		t.Errorf("bench cores --rounds 0: exit %d, output %q; want exit %d naming --rounds", code, combined, exitUsage)
	}
}

// TestBenchCoresOneCPU runs `gotrain bench cores` limited to one CPU: it
// refuses, saying there is no pair to measure.
func TestBenchCoresOneCPU(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := gotrainCmd(ctx, t, "bench", "cores")
	var out testlog.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	startOnCPUs(t, cmd.Start, 1)
	err := cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); err == nil || code != exitFailure || !strings.Contains(out.String(), "there is no pair to measure") {
		t.Fatalf("bench cores on one CPU: %v (exit %d), output %q; want exit %d saying there is no pair", err, code, out.String(), exitFailure)
	}
}
