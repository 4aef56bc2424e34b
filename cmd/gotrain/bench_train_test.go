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
	var scalings []float64
	for i, line := range lines[:2] {
		kv := summary(t, line)
		if kv["round"] != strconv.Itoa(i+1) {
			t.Fatalf("line %q: want round=%d", line, i+1)
		}
		single, ddp, s := num(t, kv, "single_sps"), num(t, kv, "ddp_sps"), num(t, kv, "scaling")
		if single <= 0 || ddp <= 0 || math.Abs(s-ddp/single) > 0.002*s {
			t.Fatalf("line %q: scaling is not ddp_sps/single_sps", line)
		}
		scalings = append(scalings, s)
	}
	kv := summary(t, stdout)
	if kv["model"] != "mlp" || kv["world"] != "2" || kv["rounds"] != "2" {
		t.Fatalf("summary %v: want model=mlp world=2 rounds=2", kv)
	}
	lo, hi := min(scalings[0], scalings[1]), max(scalings[0], scalings[1])
	if math.Abs(num(t, kv, "scaling_min")-lo) > 0.001 || math.Abs(num(t, kv, "scaling_max")-hi) > 0.001 ||
		math.Abs(num(t, kv, "scaling_median")-(lo+hi)/2) > 0.001 {
		t.Fatalf("summary %v: min/median/max disagree with the rounds %v", kv, scalings)
	}
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
