package distributed

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testproc"
)

func init() {
	// A program as a user writes it from the README: no logging set up,
	// Init with env://, run without a launcher.
	workers["handwritten"] = func() int {
		g, err := Init(context.Background(), Config{InitMethod: "env://"})
		if err != nil {
			return testproc.ExitCode(err)
		}
		fmt.Println(g.Rank(), g.Size())
		return testproc.ExitCode(g.Destroy())
	}
}

// A program started by hand is a world of one, and the library's records
// come out in the format GOTRAIN_LOG_FORMAT names, as the launcher's do.
func TestHandwrittenProgramAloneLogsLikeTheLauncher(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := testproc.Command(ctx, t, "handwritten")
	cmd.Env = slices.DeleteFunc(cmd.Env, func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		for _, p := range []string{"GOTRAIN_LOG", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_", "SLURM_", "OMPI_", "PMI_", "PMIX_", "PET_"} {
			if strings.HasPrefix(k, p) {
				return true
			}
		}
		return false
	})
	cmd.Env = append(cmd.Env, "GOTRAIN_LOG_FORMAT=json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	if got := stdout.String(); got != "0 1\n" {
		t.Fatalf("rank and size %q, want \"0 1\"", got)
	}
	alone := 0
	for l := range strings.Lines(stderr.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("stderr line %q is not a JSON record: %v", l, err)
		}
		if strings.Contains(fmt.Sprint(rec["msg"]), "a world of one, rank 0 of 1") {
			alone++
		}
	}
	if alone != 1 {
		t.Fatalf("%d records about the world of one, want 1:\n%s", alone, stderr.String())
	}
}
