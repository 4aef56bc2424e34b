package main

import (
	"context"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotrain/gotrain/harness"
	"github.com/gotrain/gotrain/internal/testproc"
	"github.com/gotrain/gotrain/testing/clustertest"
)

// healRE matches the replacement's "ft: heal received" record: the bytes
// of state it fetched and how long that took.
var healRE = regexp.MustCompile(`(?m)^\[rank1\]: .*msg="ft: heal received" .*bytes=(\d+) .*took=(\S+)`)

// BenchmarkClusterFTHeal: 2 nodes × 1 worker, each node's link shaped
// with tc tbf to BENCH_FT_RATE bit/s (default 1 Gbit/s; this kernel has
// no netem, so no added delay), train the default GPT with --ft. Once
// both have committed 10 steps, host 1's worker is SIGKILLed; host 1's
// agent restarts it and it heals from host 0's worker across the link.
// Metrics: the seconds from the kill to host 0's next committed step
// (kill_to_next_step_s), the steps the job lost (steps_lost, from the
// summary), and the state the replacement fetched from its peer
// (heal_bytes) and the seconds that took (heal_s).
func BenchmarkClusterFTHeal(b *testing.B) {
	rate := int64(1e9)
	if v := os.Getenv("BENCH_FT_RATE"); v != "" {
		var err error
		if rate, err = strconv.ParseInt(v, 10, 64); err != nil || rate < 1 {
			b.Fatalf("BENCH_FT_RATE=%q: want bits per second ≥ 1", v)
		}
	}
	for range b.N {
		c := clustertest.New(b, clustertest.Options{Hosts: 2, Env: []string{testproc.Env("gotrain"), "GOTRAIN_NUM_THREADS=1"}})
		for _, h := range c.Hosts {
			h.Shape(b, rate, 0)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		args := append([]string{"train", "gpt", "--hosts", hostList(c, 1)}, c.SSHFlags()...)
		args = append(args, "--progress=false", "--ft", "--max-steps", "300", "--eval-every", "1000",
			"--max-restarts", "1", "--restart-backoff", "0")
		_, out, code := startGotrain(b, ctx, []string{harness.EnvFTTrace + "=1"}, args...)
		if !out.waitFor(5*time.Minute, func(s string) bool { cs := commits(s); return len(cs[0]) >= 10 && len(cs[1]) >= 10 }) {
			b.Fatalf("no 10 steps committed on both hosts within 5 minutes:\n%s", out.String())
		}
		ws := workers(b, c.Hosts[1])
		if len(ws) != 1 {
			b.Fatalf("%s runs %d workers, want 1: %v", c.Hosts[1].Name, len(ws), ws)
		}
		before := len(commits(out.String())[0])
		if err := syscall.Kill(ws[0].PID, syscall.SIGKILL); err != nil {
			b.Fatal(err)
		}
		killed := time.Now()
		if !out.waitFor(time.Minute, func(s string) bool { return len(commits(s)[0]) > before }) {
			b.Fatalf("host 0 committed no step within a minute of the kill:\n%s", out.String())
		}
		next := time.Since(killed)
		if !out.waitFor(5*time.Minute, func(s string) bool { return healRE.MatchString(s) }) {
			b.Fatalf("host 1's replacement did not heal within 5 minutes:\n%s", out.String())
		}
		m := healRE.FindStringSubmatch(out.String())
		bytes, _ := strconv.ParseFloat(m[1], 64)
		took, err := time.ParseDuration(m[2])
		if err != nil {
			b.Fatalf("heal record took=%q: %v", m[2], err)
		}
		select {
		case c := <-code:
			if c != 0 {
				b.Fatalf("launcher exit code %d, want 0:\n%s", c, out.String())
			}
		case <-ctx.Done():
			b.Fatalf("the job did not end within 10 minutes:\n%s", out.String())
		}
		cancel()
		var kv map[string]string
		for l := range strings.Lines(out.String()) {
			if strings.HasPrefix(strings.TrimPrefix(l, "[rank0]: "), "model=") {
				kv = summary(b, l)
			}
		}
		if kv == nil {
			b.Fatalf("no summary line:\n%s", out.String())
		}
		b.ReportMetric(next.Seconds(), "kill_to_next_step_s")
		b.ReportMetric(num(b, kv, "steps_lost"), "steps_lost")
		b.ReportMetric(bytes, "heal_bytes")
		b.ReportMetric(took.Seconds(), "heal_s")
	}
}
