package distributed_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/internal/logging"
)

// noLauncher unsets, until the test ends, every variable by which a
// launcher or an engine places a process in a job.
func noLauncher(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		job := false
		switch k {
		case "MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK":
			job = true
		}
		for _, p := range []string{"GOTRAIN_", "PET_", "TORCHELASTIC_", "SLURM_", "OMPI_", "PMI_", "PMIX_", "MPI_"} {
			job = job || strings.HasPrefix(k, p)
		}
		if job {
			t.Setenv(k, "") // restored at the end of the test
			os.Unsetenv(k)
		}
	}
}

// A program started by hand, without a launcher, is a world of one with
// env://, as the zero Config, and says so once.
func TestInitWithoutLauncherIsWorldOfOne(t *testing.T) {
	noLauncher(t)
	for _, method := range []string{"", "env://"} {
		var logs bytes.Buffer
		g, err := distributed.Init(context.Background(), distributed.Config{InitMethod: method,
			Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatalf("InitMethod %q without a launcher: %v", method, err)
		}
		if g.Rank() != 0 || g.Size() != 1 {
			g.Destroy()
			t.Fatalf("rank %d of %d, want 0 of 1", g.Rank(), g.Size())
		}
		buf := []float32{1, 2, 3}
		err = g.AllReduce(context.Background(), buf, distributed.Sum)
		if err == nil {
			err = g.Barrier(context.Background())
		}
		g.Destroy()
		if err != nil || buf[0] != 1 || buf[2] != 3 {
			t.Fatalf("collectives in a world of one: %v, %v", buf, err)
		}
		if n := strings.Count(logs.String(), "a world of one, rank 0 of 1"); n != 1 {
			t.Fatalf("%d log lines about the world of one, want 1:\n%s", n, logs.String())
		}
	}
}

// Part of a launcher's environment is a mistake, not a world of one.
func TestInitPartialLauncherEnvRefused(t *testing.T) {
	noLauncher(t)
	t.Setenv("MASTER_ADDR", "127.0.0.1")
	g, err := distributed.Init(context.Background(), distributed.Config{})
	if err == nil {
		g.Destroy()
		t.Fatal("Init with MASTER_ADDR alone succeeded")
	}
	if !errors.Is(err, distributed.ErrConfig) || !strings.Contains(err.Error(), "RANK is not set") {
		t.Fatalf("err = %v, want ErrConfig naming RANK", err)
	}
}

// The group's records name the rank once, whether the logger carries it
// (as a launched worker's does) or not.
func TestInitRecordsNameRankOnce(t *testing.T) {
	noLauncher(t)
	for name, newLogger := range map[string]func(*bytes.Buffer) *slog.Logger{
		"plain":       func(b *bytes.Buffer) *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) },
		"with rank":   func(b *bytes.Buffer) *slog.Logger { return logging.New(b, logging.Text, slog.Int("rank", 0)) },
		"worker json": func(b *bytes.Buffer) *slog.Logger { return logging.New(b, logging.JSON, slog.Int("rank", 0)) },
	} {
		t.Run(name, func(t *testing.T) {
			var logs bytes.Buffer
			g, err := distributed.Init(context.Background(), distributed.Config{
				InitMethod: "file://" + t.TempDir() + "/store", Rank: 0, WorldSize: 1, Logger: newLogger(&logs)})
			if err != nil {
				t.Fatal(err)
			}
			g.Destroy()
			var line string
			for l := range strings.Lines(logs.String()) {
				if strings.Contains(l, "advertising address") {
					line = l
				}
			}
			if n := strings.Count(line, "rank"); n != 1 {
				t.Fatalf("advertising record %q names the rank %d times, want 1", line, n)
			}
		})
	}
}
