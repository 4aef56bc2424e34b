package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// progressArgs are tinyGPT's with progress on and a plain line at every
// step report (at most every 100 ms), over 12 steps evaluated every 4.
func progressArgs(extra ...string) []string {
	args := append([]string(nil), tinyGPT...)
	for i, a := range args {
		switch a {
		case "--max-steps":
			args[i+1] = "12"
		case "--eval-every":
			args[i+1] = "4"
		}
	}
	return append(append(args, "--progress", "--log-every", "0.001", "--sample", "0"), extra...)
}

// TestTrainGPTProgressLines trains the GPT alone and on 2 workers with
// progress on a stderr that is not a terminal: every evaluation
// interval's line names it "eval k/3" with the run's "step n/12", no
// line names an epoch, the periodic lines count the run's steps, and no
// line of the display is 80 columns or wider.
func TestTrainGPTProgressLines(t *testing.T) {
	intervalRe := regexp.MustCompile(`(?m)^eval (\d)/3 step (\d+)/12: train_loss \d+\.\d+ val_loss \d+\.\d+ lr `)
	periodicRe := regexp.MustCompile(`(?m)^step (\d+)/12 .*eval \d/3`)
	for _, n := range []string{"1", "2"} {
		t.Run("nproc-"+n, func(t *testing.T) {
			all, stdout, code := runGotrain(t, 90*time.Second, progressArgs("--nproc-per-node", n)...)
			if code != 0 {
				t.Fatalf("exit code %d; output:\n%s", code, all)
			}
			var got []string
			for _, m := range intervalRe.FindAllStringSubmatch(all, -1) {
				got = append(got, m[1]+"@"+m[2])
			}
			if fmt.Sprint(got) != "[1@4 2@8 3@12]" {
				t.Errorf("interval lines at %v; want eval 1/3 at step 4, 2/3 at 8, 3/3 at 12; output:\n%s", got, all)
			}
			if periodicRe.FindString(all) == "" {
				t.Errorf("no periodic line with the run's step of 12 and its interval; output:\n%s", all)
			}
			for l := range strings.Lines(all) {
				l = strings.TrimSuffix(l, "\n")
				if strings.Contains(l, "epoch") {
					t.Errorf("line %q names an epoch", l)
				}
				display := intervalRe.MatchString(l) || periodicRe.MatchString(l)
				if display && len(l) >= 80 {
					t.Errorf("line %q is %d columns; want fewer than 80", l, len(l))
				}
			}
			if !strings.Contains(stdout, "model=gpt world="+n+" steps=12 ") {
				t.Errorf("stdout %q: want the summary", stdout)
			}
		})
	}
}

// TestTrainShortRunThroughput: a run shorter than the 5-step warm-up
// reports a throughput, not 0, measured over its steps after the first,
// and says so.
func TestTrainShortRunThroughput(t *testing.T) {
	args := append([]string(nil), tinyGPT...)
	for i, a := range args {
		if a == "--max-steps" {
			args[i+1] = "3"
		}
	}
	all, stdout, code := runGotrain(t, 60*time.Second, append(args, "--sample", "0")...)
	if code != 0 {
		t.Fatalf("exit code %d; output:\n%s", code, all)
	}
	m := regexp.MustCompile(`tokens_per_s=(\d+)`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("stdout %q: no tokens_per_s", stdout)
	}
	if v, _ := strconv.Atoi(m[1]); v <= 0 || !strings.Contains(all, "throughput measured over steps 2-3") {
		t.Fatalf("tokens_per_s=%s; output:\n%s\nwant a rate over steps 2-3, said so", m[1], all)
	}
}
