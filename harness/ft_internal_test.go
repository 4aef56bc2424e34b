package harness

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/ddp/ft"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/optim"
)

func TestFTConfigRefused(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{FT: true, DiLoCo: 4, DiLoCoDelay: 1}, "DiLoCoDelay 1"},
		{Config{FT: true, Sharding: ShardZero1}, "Sharding"},
		{Config{FT: true, OnNaN: OnNaNSkip}, "OnNaN skip"},
		{Config{MinReplicas: 2}, "needs FT"},
		{Config{FT: true, MinReplicas: -1}, "MinReplicas -1"},
	} {
		if _, err := Start(context.Background(), tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Start(%+v) = %v, want an error naming %q", tc.cfg, err, tc.want)
		}
	}
}

func TestFTNeedsLauncher(t *testing.T) {
	t.Setenv("GOTRAIN_FT", "")
	if _, err := Start(context.Background(), Config{FT: true}); !errors.Is(err, errFTNeedsLauncher) {
		t.Fatalf("Start without the launcher's environment: %v, want errFTNeedsLauncher", err)
	}
}

// The heal payload carries the model, the optimizer and the counters.
func TestFTSnapshotLoad(t *testing.T) {
	newState := func(seed float32) *checkpoint.TrainingState {
		m := nn.Linear(3, 2)
		for i, p := range nn.Parameters(m) {
			for j := range p.Data() {
				p.Data()[j] = seed + float32(i*10+j)
			}
		}
		return &checkpoint.TrainingState{Model: m, Optimizer: optim.NewSGD(nn.Parameters(m), 0.1, optim.Momentum(0.9))}
	}
	src, dst := newState(1), newState(-5)
	src.Step, src.Epoch = 42, 3
	b, err := snapshotState(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := loadState(dst, b); err != nil {
		t.Fatal(err)
	}
	if dst.Step != 42 || dst.Epoch != 3 || weightHash(nn.Parameters(dst.Model)) != weightHash(nn.Parameters(src.Model)) {
		t.Errorf("loaded step %d epoch %d, weights %s; want 42, 3, %s", dst.Step, dst.Epoch,
			weightHash(nn.Parameters(dst.Model)), weightHash(nn.Parameters(src.Model)))
	}
	if err := loadState(dst, b[:len(b)/2]); err == nil {
		t.Error("a truncated payload loaded")
	}
}

// observe counts a member dropped and a member restarted in place, once
// each, and a new member not at all.
func TestFTObserveCountsFailures(t *testing.T) {
	q := func(ids []string, recover ...string) ft.Quorum {
		var ms []ft.Member
		for _, id := range ids {
			ms = append(ms, ft.Member{ID: id})
		}
		return ft.Quorum{Members: ms, Recover: recover}
	}
	f := &ftRun{id: "a", log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	abc := []string{"a", "b", "c"}
	for _, step := range []ft.Quorum{
		q(abc),
		q(abc, "b"), // b was restarted and heals
		q(abc, "b"), // the same heal, retried
		q(abc),
		q([]string{"a", "b"}),           // c left
		q([]string{"a", "b", "d"}, "d"), // d is new
	} {
		f.observe(step, true)
	}
	if f.failures != 2 {
		t.Errorf("failures = %d, want 2 (b restarted, c left)", f.failures)
	}
	joiner := &ftRun{id: "b", join: true, log: f.log}
	joiner.observe(q(abc, "b"), false)
	if joiner.failures != 1 {
		t.Errorf("a restarted replica counts %d failures at its join, want 1 (its own)", joiner.failures)
	}
}
