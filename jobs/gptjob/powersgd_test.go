package gptjob

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/gotrain/gotrain/internal/testnet"
	"github.com/gotrain/gotrain/jobs/jobflag"
)

// runTwoRanks runs cfg as both ranks of a 2-rank job inside this process,
// over loopback, and returns rank 0's result.
func runTwoRanks(t *testing.T, cfg Config) Result {
	t.Helper()
	cfg.InitMethod, cfg.WorldSize = "tcp://"+testnet.FreeAddr(t), 2
	var wg sync.WaitGroup
	res := make([]Result, 2)
	errs := make([]error, 2)
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cfg
			c.Rank = r
			res[r], errs[r] = Run(context.Background(), c)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return res[0]
}

// The GPT trains on 2 ranks with --comm-hook powersgd to a validation loss
// close to float32 averaging's: within 3% after 200 steps of the tiny model
// (the benchmark compares the default GPT).
func TestTwoRanksPowerSGDTrainsGPT(t *testing.T) {
	cfg := tiny()
	cfg.MaxSteps, cfg.EvalEvery = 200, 200
	want := runTwoRanks(t, cfg)
	start := 5
	cfg.CommHook, cfg.PowerSGD = "powersgd", jobflag.PowerSGD{Rank: 2, StartIter: &start}
	got := runTwoRanks(t, cfg)
	t.Logf("validation loss %.4f with powersgd, %.4f with allreduce", got.ValLoss, want.ValLoss)
	if got.ValLoss > want.ValLoss*1.03 {
		t.Errorf("powersgd: validation loss %.4f, allreduce %.4f: more than 3%% higher", got.ValLoss, want.ValLoss)
	}
}

func TestPowerSGDConfigMistakes(t *testing.T) {
	for _, c := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.CommHook = "gzip" }, `CommHook "gzip"`},
		{func(c *Config) { c.CommHook, c.PowerSGD.Rank = "powersgd", -1 }, "PowerSGD rank -1"},
		{func(c *Config) { c.CommHook, c.PowerSGD.StartIter = "powersgd", new(-2) }, "start iteration -2"},
	} {
		cfg := tiny()
		c.edit(&cfg)
		if _, err := Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("err = %v, want %q", err, c.want)
		}
	}
}
