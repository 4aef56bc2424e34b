package main

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testlog"
	"github.com/gotrain/gotrain/internal/testproc"
	"github.com/gotrain/gotrain/launch"
	"github.com/gotrain/gotrain/progress/console"
)

// TestProgressUnderLauncher runs the example on 2 workers under the
// launcher `gotrain run` is, rendering on a console that is not a
// terminal: the workers report progress (by default) and the console
// prints it, the run's step of its total among it, and the epoch's line.
func TestProgressUnderLauncher(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var display, out testlog.Buffer
	cons := console.New(console.Options{Out: &display, Mode: console.Plain, LogEvery: time.Nanosecond, Ranks: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var env []string
	for _, kv := range testproc.Environ("main") {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT":
		default:
			env = append(env, kv)
		}
	}
	code, err := launch.Run(ctx, launch.Config{
		Program: exe, Args: []string{"--max-steps", "30"}, NProcPerNode: 2, Standalone: true,
		Env: append(env, "GOTRAIN_NUM_THREADS=1"), Stdout: &out, Stderr: &out, Events: cons.Event,
	})
	cons.Close()
	if err != nil || code != 0 {
		t.Fatalf("launch.Run: %d, %v; output:\n%s", code, err, out.String())
	}
	text := display.String()
	if !regexp.MustCompile(`(?m)^epoch 1/1 \d+/469 (\d+% )?step \d+/30 `).MatchString(text) ||
		!regexp.MustCompile(`(?m)^epoch 1/1: 30 steps train_loss \d\.\d+ test_acc \d\.\d+`).MatchString(text) {
		t.Fatalf("progress:\n%s\nwant lines with the epoch's step and the run's of 30, then the epoch's line", text)
	}
	summary := regexp.MustCompile(`model=mlp .*`).FindString(out.String())
	checkSummary(t, summary, "2")
}
