package fsdp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/ddp"
	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/internal/testproc"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/nn/models"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// memoryEnv configures BenchmarkGPTMemory: comma-separated key=value
// pairs among layers, width, heads, block (sequence length), batch,
// vocab, steps and world. Unset keys take the sizes of the memory target,
// a 12×768 GPT at world 4.
const memoryEnv = "GOTRAIN_BENCH_GPT_MEMORY"

// memoryConfig is one BenchmarkGPTMemory run.
type memoryConfig struct {
	GPT          models.GPTConfig
	Batch, Steps int
	World        int
}

func parseMemoryConfig(s string) (memoryConfig, error) {
	c := memoryConfig{GPT: models.GPTConfig{VocabSize: 50304, BlockSize: 256, NLayer: 12, NHead: 12, NEmbd: 768}, Batch: 2, Steps: 3, World: 4}
	if s == "" {
		return c, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		n, err := strconv.Atoi(v)
		if !ok || err != nil || n < 1 {
			return c, fmt.Errorf("%s: %q is not key=positive integer", memoryEnv, kv)
		}
		switch k {
		case "layers":
			c.GPT.NLayer = n
		case "width":
			c.GPT.NEmbd = n
		case "heads":
			c.GPT.NHead = n
		case "block":
			c.GPT.BlockSize = n
		case "vocab":
			c.GPT.VocabSize = n
		case "batch":
			c.Batch = n
		case "steps":
			c.Steps = n
		case "world":
			c.World = n
		default:
			return c, fmt.Errorf("%s: unknown key %q (want layers, width, heads, block, vocab, batch, steps or world)", memoryEnv, k)
		}
	}
	if c.GPT.NEmbd%c.GPT.NHead != 0 {
		return c, fmt.Errorf("%s: width %d is not a multiple of heads %d", memoryEnv, c.GPT.NEmbd, c.GPT.NHead)
	}
	return c, nil
}

// memoryResult is what one worker rank measured.
type memoryResult struct {
	PeakRSS      int64 // bytes: the process's VmHWM after training
	PeakGathered int64 // bytes: Footprint.PeakGathered (0 for DDP)
}

// BenchmarkGPTMemory trains a GPT for a few AdamW steps under DDP and
// under each sharding strategy, each rank a separate process (world 4 by
// default), and reports the largest peak RSS of any rank per strategy
// ("<strategy>-peak-RSS-MiB"), its ratio to DDP's ("<strategy>/ddp-RSS"),
// and FullShard's peak gathered parameters ("full-gathered-MiB"). Run it
// once per size, alone on the machine:
//
//	go test -run '^$' -bench BenchmarkGPTMemory -benchtime 1x ./ddp/fsdp
//	GOTRAIN_BENCH_GPT_MEMORY=layers=2,width=32,heads=2,block=16,vocab=64 go test …
func BenchmarkGPTMemory(b *testing.B) {
	cfg, err := parseMemoryConfig(os.Getenv(memoryEnv))
	if err != nil {
		b.Fatal(err)
	}
	enc, _ := json.Marshal(cfg)
	for range b.N {
		peak := map[string]memoryResult{}
		for _, name := range []string{"ddp", "zero2", "full"} {
			out := b.TempDir()
			ranks := testproc.Start(b, "gptmem", cfg.World, testproc.Options{
				Env:     []string{"GOTRAIN_TOKEN=fsdp-bench", "OUT=" + out, "GPTMEM_STRATEGY=" + name, "GPTMEM_CONFIG=" + string(enc)},
				Timeout: time.Hour,
			})
			ranks.WaitOK()
			for r := range cfg.World {
				buf, err := os.ReadFile(filepath.Join(out, fmt.Sprintf("rank%d.json", r)))
				if err != nil {
					b.Fatal(err)
				}
				var res memoryResult
				if err := json.Unmarshal(buf, &res); err != nil {
					b.Fatal(err)
				}
				p := peak[name]
				p.PeakRSS, p.PeakGathered = max(p.PeakRSS, res.PeakRSS), max(p.PeakGathered, res.PeakGathered)
				peak[name] = p
			}
		}
		for name, p := range peak {
			b.ReportMetric(float64(p.PeakRSS)/(1<<20), name+"-peak-RSS-MiB")
			if name != "ddp" {
				b.ReportMetric(float64(p.PeakRSS)/float64(peak["ddp"].PeakRSS), name+"/ddp-RSS")
			}
		}
		b.ReportMetric(float64(peak["full"].PeakGathered)/(1<<20), "full-gathered-MiB")
	}
}

// gptMemWorker is one rank of BenchmarkGPTMemory: it trains the GPT that
// $GPTMEM_CONFIG describes under $GPTMEM_STRATEGY (ddp or a sharding
// strategy) and writes its peak RSS to $OUT/rank<r>.json.
func gptMemWorker() error {
	var cfg memoryConfig
	if err := json.Unmarshal([]byte(os.Getenv("GPTMEM_CONFIG")), &cfg); err != nil {
		return fmt.Errorf("GPTMEM_CONFIG: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	g, err := distributed.Init(ctx, distributed.Config{InitMethod: "env://", Timeout: 10 * time.Minute})
	if err != nil {
		return err
	}
	defer g.Destroy()
	m := models.GPT(cfg.GPT)
	m.ResetParameters(tensor.NewRNG(1))
	var (
		forward   func(x *tensor.Tensor) (*tensor.Tensor, error)
		params    []*tensor.Tensor
		footprint = func() int64 { return 0 } // DDP gathers nothing
	)
	if name := os.Getenv("GPTMEM_STRATEGY"); name == "ddp" {
		dm, err := ddp.New(ctx, m, g)
		if err != nil {
			return err
		}
		defer dm.Close()
		forward = func(x *tensor.Tensor) (*tensor.Tensor, error) { return dm.Forward(x), nil }
		params = dm.Parameters()
	} else {
		s, err := ParseStrategy(name)
		if err != nil {
			return err
		}
		fm, err := New(ctx, m, g, Strategy(s))
		if err != nil {
			return err
		}
		defer fm.Close()
		forward, params = fm.ForwardErr, fm.Parameters()
		footprint = func() int64 { return fm.Footprint().PeakGathered }
	}
	opt := optim.NewAdamW(params, 1e-4)
	B, T := cfg.Batch, cfg.GPT.BlockSize
	for step := range cfg.Steps {
		rng := tensor.NewRNG(uint64(1000*step + g.Rank() + 1))
		ids, targets := make([]int, B*T), make([]int, B*T)
		for i := range ids {
			ids[i], targets[i] = rng.Intn(cfg.GPT.VocabSize), rng.Intn(cfg.GPT.VocabSize)
		}
		opt.ZeroGrad()
		out, err := forward(nn.IDTensor(ids, B, T))
		if err != nil {
			return err
		}
		if err := tensor.CrossEntropyIgnore(out, targets, models.IgnoreIndex, "mean").Backward(); err != nil {
			return err
		}
		opt.Step()
	}
	rss, err := peakRSS()
	if err != nil {
		return err
	}
	buf, err := json.Marshal(memoryResult{PeakRSS: rss, PeakGathered: footprint()})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(os.Getenv("OUT"), fmt.Sprintf("rank%d.json", g.Rank())), buf, 0o644)
}

// peakRSS reads this process's peak resident set size (VmHWM).
func peakRSS() (int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/self/status: VmHWM %q: %w", rest, err)
			}
			return kb << 10, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("/proc/self/status has no VmHWM line")
}
