package main

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestBenchTrain(t *testing.T) {
	all, stdout, code := runGotrain(t, 120*time.Second, "bench", "train", "--rounds", "2", "--", "--max-steps", "20")
	if code != 0 {
		t.Fatalf("exit code %d; output:\n%s", code, all)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 2 round lines and a summary, got:\n%s", stdout)
	}
	// Each figure is printed rounded, so two of them agree within what
	// their rounding allows: half a unit of each one's last digit, carried
	// through the quotient for the throughputs.
	var scalings []float64
	var printed []string
	for i, line := range lines[:2] {
		kv := summary(t, line)
		if kv["round"] != strconv.Itoa(i+1) {
			t.Fatalf("line %q: want round=%d", line, i+1)
		}
		single, ddp, s := num(t, kv, "single_sps"), num(t, kv, "ddp_sps"), num(t, kv, "scaling")
		if single <= 0 || ddp <= 0 {
			t.Fatalf("line %q: throughputs must be positive", line)
		}
		q := ddp / single
		tol := halfUnit(kv["scaling"]) + q*(halfUnit(kv["ddp_sps"])/ddp+halfUnit(kv["single_sps"])/single) + 1e-9
		if math.Abs(s-q) > tol {
			t.Fatalf("line %q: scaling is not ddp_sps/single_sps (%.6f) within the printed precision (±%.6f)", line, q, tol)
		}
		scalings, printed = append(scalings, s), append(printed, kv["scaling"])
	}
	kv := summary(t, stdout)
	if kv["model"] != "mlp" || kv["world"] != "2" || kv["rounds"] != "2" {
		t.Fatalf("summary %v: want model=mlp world=2 rounds=2", kv)
	}
	// The minimum and maximum are rounds' values, printed alike.
	lo, hi := printed[0], printed[1]
	if scalings[1] < scalings[0] {
		lo, hi = hi, lo
	}
	median := (scalings[0] + scalings[1]) / 2
	if kv["scaling_min"] != lo || kv["scaling_max"] != hi ||
		math.Abs(num(t, kv, "scaling_median")-median) > halfUnit(kv["scaling_median"])+halfUnit(printed[0])+1e-9 {
		t.Fatalf("summary %v: min/median/max disagree with the rounds %v", kv, printed)
	}
}

// halfUnit is half a unit in the last digit of the printed number v: how
// far the value it was rounded from may be.
func halfUnit(v string) float64 {
	decimals := 0
	if _, frac, ok := strings.Cut(v, "."); ok {
		decimals = len(frac)
	}
	return 0.5 * math.Pow(10, -float64(decimals))
}

func TestBenchTrainBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--nproc", "1"}, "--nproc 1"},
		{[]string{"--rounds", "0"}, "--rounds 0"},
		{[]string{"--", "--nproc-per-node", "3"}, "use --nproc"},
		{[]string{"--", "--model", "resnet"}, "resnet"},
	} {
		all, _, code := runGotrain(t, 60*time.Second, append([]string{"bench", "train"}, tc.args...)...)
		if code == 0 || !strings.Contains(all, tc.want) {
			t.Errorf("bench train %v: exit code %d, output:\n%s\nwant a failure naming %q", tc.args, code, all, tc.want)
		}
	}
}
