package main

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/kernels"
	"github.com/gotrain/gotrain/nn/models"
)

// TestBenchGemmBound runs `gotrain bench gemm` briefly and checks its last
// lines: the CNN's and the GPT's GEMM work per step (fixed by the models)
// and bounds consistent with the measured times, for the default GPT and
// for GPT-2 small's width at block 256, batch 4.
func TestBenchGemmBound(t *testing.T) {
	gpt2 := []string{"--gpt-layers", "12", "--gpt-heads", "12", "--gpt-embd", "768", "--gpt-block", "256", "--gpt-batch", "4"}
	for _, tc := range []struct {
		precision, shape string
		flags            []string
		// The GEMM work is fixed by each model. The CNN's is 4.580 GFLOP
		// for 64 images. The GPT's linear layers and lm_head take
		// layers·(3+1+4+4)·2·tokens·C²·3 + 2·tokens·256·C·3, attention's
		// products of the tiled kernel p·2·dh·rows·keys per head, rows·keys
		// = 32·(32+64+…+T) (10/16 of T² at 128, 9/16 at 256), p = 6 up to
		// T = 128 (backward reads the kept probabilities) and 7 above (it
		// recomputes the scores), and the model's six over half the
		// scores 6·2·dh·T²/2 per head. Default (4096 tokens, C 128, 512
		// heads of 128×32): 19.327 + 0.805 + 6·2·32·10240·512 = 22.146
		// GFLOP run, 21.743 needed. 12×768 (1024 tokens, 576 heads of
		// 256×64): 521.839 + 1.208 + 7·2·64·36864·576 = 542.072 run,
		// 537.542 needed.
		gflop, modelGflop string
		tokens            float64
	}{
		{"fp32", "4x128", nil, "22.146", "21.743", 4096},
		{"bf16-emulated", "4x128", nil, "22.146", "21.743", 4096},
		{"fp32", "12x768", gpt2, "542.072", "537.542", 1024},
	} {
		args := append([]string{"bench", "gemm", "--min-time", "1ms", "--threads", "1", "--precision", tc.precision}, tc.flags...)
		out, _, code := runGotrain(t, 120*time.Second, args...)
		if code != 0 {
			t.Fatalf("bench gemm --precision %s %s: exit %d:\n%s", tc.precision, tc.shape, code, out)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != len(gemmCases)+2 {
			t.Fatalf("bench gemm: %d lines, want %d:\n%s", len(lines), len(gemmCases)+2, out)
		}
		m := regexp.MustCompile(`^step=cnn precision=(\S+) gflop_per_step=([0-9.]+) gemm_seconds_per_step=([0-9.]+) bound_samples_per_s=([0-9]+)$`).FindStringSubmatch(lines[len(lines)-2])
		if m == nil {
			t.Fatalf("bench gemm: line %q", lines[len(lines)-2])
		}
		if m[1] != tc.precision || m[2] != "4.580" {
			t.Errorf("bench gemm: %q, want precision %s and 4.580 GFLOP per step", m[0], tc.precision)
		}
		checkBound(t, m[3], m[4], 64)
		m = regexp.MustCompile(`^step=gpt precision=(\S+) layers=(\d+) heads=(\d+) embd=(\d+) block=(\d+) batch=(\d+) vocab=256 gflop_per_step=([0-9.]+) gemm_seconds_per_step=([0-9.]+) bound_tokens_per_s=([0-9]+) model_gflop_per_step=([0-9.]+) model_bound_tokens_per_s=([0-9]+)$`).FindStringSubmatch(lines[len(lines)-1])
		if m == nil {
			t.Fatalf("bench gemm: line %q", lines[len(lines)-1])
		}
		if shape := m[2] + "x" + m[4]; m[1] != tc.precision || shape != tc.shape || m[7] != tc.gflop || m[10] != tc.modelGflop {
			t.Errorf("bench gemm: %q, want precision %s, GPT %s, %s GFLOP per step run and %s needed", m[0], tc.precision, tc.shape, tc.gflop, tc.modelGflop)
		}
		checkBound(t, m[8], m[9], tc.tokens)
		// The model's work is the smaller: its bound is the higher, by no
		// more than the work's ratio allows (attention runs at its own
		// mean rate, which may differ from the linear layers').
		bound, _ := strconv.ParseFloat(m[9], 64)
		modelBound, _ := strconv.ParseFloat(m[11], 64)
		run, _ := strconv.ParseFloat(m[7], 64)
		need, _ := strconv.ParseFloat(m[10], 64)
		if modelBound < bound {
			t.Errorf("bench gemm: the model's bound %v tokens/s below the step's %v", modelBound, bound)
		}
		if modelBound > bound*run/need*1.5 {
			t.Errorf("bench gemm: the model's bound %v tokens/s far above the step's %v for %v against %v GFLOP", modelBound, bound, need, run)
		}
	}
}

// checkBound checks a printed bound against the printed seconds per step
// of per samples: the bound is the work over the time, each printed
// rounded, so their product is the work within what the rounding allows.
func checkBound(t *testing.T, secsText, boundText string, per float64) {
	t.Helper()
	secs, _ := strconv.ParseFloat(secsText, 64)
	bound, _ := strconv.ParseFloat(boundText, 64)
	if secs <= 0 || bound <= 0 || math.Abs(bound*secs/per-1) > halfUnit(secsText)/secs+halfUnit(boundText)/bound+1e-9 {
		t.Errorf("bench gemm: bound %v per s inconsistent with %v s per step of %v", bound, secs, per)
	}
}

// TestBenchGemmBadGPT checks that an impossible GPT shape is one line
// naming the flag.
func TestBenchGemmBadGPT(t *testing.T) {
	for _, tc := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--gpt-embd", "100", "--gpt-heads", "3"}, "--gpt-embd 100: must be a multiple of --gpt-heads (3)"},
		{[]string{"--gpt-batch", "0"}, "--gpt-batch 0: must be at least 1"},
		{[]string{"--gpt-block", "-4"}, "--gpt-block -4: must be at least 1"},
	} {
		out, _, code := runGotrain(t, 30*time.Second, append([]string{"bench", "gemm"}, tc.flags...)...)
		if code != 2 || strings.TrimSpace(out) != "gotrain: "+tc.want {
			t.Errorf("bench gemm %v: exit %d, output %q, want exit 2 and the one line %q", tc.flags, code, out, "gotrain: "+tc.want)
		}
	}
}

// TestGPTStepGemmsAreTheStepsGemms runs one training step of GPTs (one
// whose block is a single key tile, one of two tiles, one whose block is
// not a whole number of row tiles) with a GEMM observer and checks that
// the shapes, transposes and counts the step runs are gptStepGemms'.
func TestGPTStepGemmsAreTheStepsGemms(t *testing.T) {
	for _, g := range []gptShape{
		{layers: 2, heads: 2, embd: 64, block: 128, batch: 2, vocab: 256},
		{layers: 1, heads: 2, embd: 64, block: 256, batch: 1, vocab: 256},
		{layers: 1, heads: 3, embd: 48, block: 100, batch: 2, vocab: 97},
	} {
		t.Run(fmt.Sprintf("%dx%d_block%d", g.layers, g.embd, g.block), func(t *testing.T) {
			cfg := models.GPTConfig{VocabSize: g.vocab, BlockSize: g.block, NLayer: g.layers, NHead: g.heads, NEmbd: g.embd, Bias: true}
			m := models.GPT(cfg)
			ids, targets := make([]int, g.tokens()), make([]int, g.tokens())
			for i := range ids {
				ids[i], targets[i] = (i*7)%g.vocab, (i*7+1)%g.vocab
			}
			var mu sync.Mutex
			got := map[gemmCase]int{}
			prev := kernels.SetGemmObserver(func(c kernels.GemmCall) {
				mu.Lock()
				got[gemmCase{c.M, c.N, c.K, c.TransA, c.TransB}]++
				mu.Unlock()
			})
			_, loss := m.Loss(ids, targets, g.batch, g.block)
			err := loss.Backward()
			kernels.SetGemmObserver(prev)
			if err != nil {
				t.Fatal(err)
			}
			want := map[gemmCase]int{}
			for _, s := range gptStepGemms(g) {
				want[s.gemmCase] += s.count
			}
			for c, n := range want {
				if got[c] != n {
					t.Errorf("m=%d n=%d k=%d %s: the step ran %d, gptStepGemms counts %d", c.m, c.n, c.k, transName(c.transA, c.transB), got[c], n)
				}
			}
			for c, n := range got {
				if _, ok := want[c]; !ok {
					t.Errorf("m=%d n=%d k=%d %s: the step ran %d, gptStepGemms counts none", c.m, c.n, c.k, transName(c.transA, c.transB), n)
				}
			}
		})
	}
}

// TestAttentionGemmsShare checks the tiled kernel's share of the T×T
// scores per product that attentionGemms counts: 10/16 at T = 128, 9/16
// at 256, and the products: six up to T = 128, where backward reads the
// kept probabilities, seven above, where it recomputes the scores.
func TestAttentionGemmsShare(t *testing.T) {
	for _, tc := range []struct {
		t, products int
		share       float64
	}{{128, 6, 10.0 / 16}, {256, 7, 9.0 / 16}, {32, 6, 1}} {
		f := gemmFlops(attentionGemms(tc.t, 64, 1))
		if want := float64(tc.products) * 2 * 64 * float64(tc.t*tc.t) * tc.share; f != want {
			t.Errorf("T=%d: attention FLOPs %v, want %v (%d products at %v of the scores)", tc.t, f, want, tc.products, tc.share)
		}
	}
}
