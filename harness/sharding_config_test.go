package harness_test

import (
	"context"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/harness"
)

// TestDataParallelConfigRefused: Start refuses the sharding and
// LocalSGD/DiLoCo settings that do not fit, naming them, before joining
// any group.
func TestDataParallelConfigRefused(t *testing.T) {
	for _, tc := range []struct {
		cfg  harness.Config
		want string
	}{
		{harness.Config{Sharding: "zero3"}, `harness: Sharding "zero3": want none, zero1, zero2, full or hybrid`},
		{harness.Config{Sharding: "full", DiLoCo: 5}, `harness: Sharding "full" with LocalSGD or DiLoCo`},
		{harness.Config{LocalSGD: 2, DiLoCo: 3}, "harness: LocalSGD 2 and DiLoCo 3: choose one"},
		{harness.Config{DiLoCo: -1}, "harness: LocalSGD 0, DiLoCo -1: want at least 1"},
		{harness.Config{LocalSGD: 4, DiLoCoBF16: true}, "need DiLoCo"},
		{harness.Config{DiLoCoFragments: 2}, "harness: DiLoCoFragments 2 needs DiLoCo or LocalSGD"},
		{harness.Config{DiLoCo: 4, DiLoCoOuterMomentum: ptr(1.0)}, "harness: DiLoCoOuterMomentum 1: want at least 0 and below 1"},
		{harness.Config{DiLoCo: 4, DiLoCoOuterLR: ptr(0.0)}, "harness: DiLoCoOuterLR 0: want a positive learning rate"},
		{harness.Config{LocalSGD: 4, DiLoCoOuterLR: ptr(0.5)}, "need DiLoCo"},
	} {
		r, err := harness.Start(context.Background(), tc.cfg)
		if err == nil {
			r.Close()
			t.Errorf("Start(%+v): no error, want %q", tc.cfg, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Start(%+v): %q, want one line containing %q", tc.cfg, err, tc.want)
		}
	}
}

// TestShardedDir: the sharded checkpoints go beside the model file.
func TestShardedDir(t *testing.T) {
	for save, want := range map[string]string{"run/gpt.safetensors": "run/gpt.sharded", "model": "model.sharded"} {
		if got := harness.ShardedDir(save); got != want {
			t.Errorf("ShardedDir(%q) = %q, want %q", save, got, want)
		}
	}
}

func ptr[T any](v T) *T { return &v }
