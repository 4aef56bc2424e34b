package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/checkpoint"
)

// A save that runs out of space (here the file size limit, which fails
// writes as a full disk does) strands no model file without its training
// state: the next --resume starts afresh instead of refusing to.
func TestSaveOutOfSpaceLeavesResumable(t *testing.T) {
	dir := t.TempDir()
	save := filepath.Join(dir, "m.safetensors")
	args := []string{"train", "mnist", "--max-steps", "2", "--progress=false", "--save", save}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := gotrainCmd(ctx, t, args...)
	// 4 MiB (ulimit counts 512-byte blocks in POSIX sh): room for the
	// MLP's model file (2.7 MB), not for its training state (5.4 MB).
	cmd.Args = append([]string{"sh", "-c", `ulimit -f 8192 && exec "$0" "$@"`, cmd.Path}, cmd.Args[1:]...)
	cmd.Path = "/bin/sh"
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err == nil || !strings.Contains(out.String(), "file too large") {
		t.Fatalf("a save past the size limit: err %v; output:\n%s", err, out.String())
	}
	if des, _ := os.ReadDir(dir); len(des) != 0 {
		var names []string
		for _, de := range des {
			names = append(names, de.Name())
		}
		t.Fatalf("the failed save left %v", names)
	}

	all, _, code := runGotrain(t, 60*time.Second, append(args, "--resume")...)
	if code != 0 {
		t.Fatalf("--resume after the failed save: exit code %d; output:\n%s", code, all)
	}
	for _, p := range []string{save, checkpoint.TrainingPath(save)} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("after the run: %v", err)
		}
	}
}
