package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/data/tokenizer"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/nn/models"
)

// hfGPT2Fixture is nn/models' Hugging Face GPT-2 fixture (vocabulary 256,
// so the bytes tokenizer fits it) and its greedy continuation by
// transformers' generate.
var (
	hfGPT2Fixture = filepath.Join("..", "..", "nn", "models", "testdata", "hf_gpt2")
	hfGPT2Prompt  = []byte{3, 141, 59, 26, 5}
	hfGPT2Greedy  = []byte{28, 179, 179, 179, 134, 134, 179, 179, 179, 179, 177, 23}
)

// runGenerateCmd runs `gotrain args...` to completion and returns its
// stdout, the lines of its stderr and its exit code.
func runGenerateCmd(t *testing.T, args ...string) (stdout string, stderr []string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := gotrainCmd(ctx, t, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("gotrain %s: still running after 60s; stderr:\n%s", strings.Join(args, " "), errOut.String())
	}
	code = cmd.ProcessState.ExitCode()
	if err != nil && code <= 0 {
		t.Fatalf("gotrain %s: %v; stderr:\n%s", strings.Join(args, " "), err, errOut.String())
	}
	for _, l := range strings.Split(errOut.String(), "\n") {
		if l != "" {
			stderr = append(stderr, l)
		}
	}
	return out.String(), stderr, code
}

// TestGenerateFromTrainedGPT trains a tiny GPT for two steps, saves it, and
// generates from the checkpoint: the text is the prompt and the requested
// number of bytes, the same for the same seed, and greedy decoding equals
// models.Generate on the saved weights.
func TestGenerateFromTrainedGPT(t *testing.T) {
	save := filepath.Join(t.TempDir(), "gpt.safetensors")
	train := []string{"train", "gpt", "--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "16",
		"--batch-size", "4", "--max-steps", "2", "--eval-every", "2", "--eval-batches", "1", "--warmup-steps", "1",
		"--progress=false", "--save", save}
	if all, _, code := runGotrain(t, 60*time.Second, train...); code != 0 {
		t.Fatalf("train: exit code %d; output:\n%s", code, all)
	}
	gen := func(args ...string) (string, []string) {
		t.Helper()
		args = append([]string{"generate", "--checkpoint", save, "--n-head", "2", "--prompt", "func main() {", "--max-new-tokens", "40"}, args...)
		stdout, errLines, code := runGenerateCmd(t, args...)
		if code != 0 {
			t.Fatalf("generate: exit code %d; stderr:\n%s", code, strings.Join(errLines, "\n"))
		}
		return stdout, errLines
	}
	sampled, errLines := gen("--seed", "7")
	if !strings.HasPrefix(sampled, "func main() {") || len(sampled) != len("func main() {")+40+1 || !strings.HasSuffix(sampled, "\n") {
		t.Fatalf("stdout %q: want the prompt, 40 bytes and a newline", sampled)
	}
	if len(errLines) != 2 || !strings.Contains(errLines[0], "(nanoGPT names): n_layer=1 n_head=2 n_embd=16 block_size=16 vocab_size=256, 7664 parameters; prompt: 13 tokens") ||
		!strings.HasPrefix(errLines[1], "generated 40 tokens in ") || !strings.HasSuffix(errLines[1], " tokens/s") {
		t.Fatalf("stderr %q: want the model's line and the speed", errLines)
	}
	if again, _ := gen("--seed", "7"); again != sampled {
		t.Fatalf("seed 7 twice: %q and %q", sampled, again)
	}

	m, _, _, err := models.LoadGPTWeights(save, 2)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := models.Generate(context.Background(), m, byteIDs([]byte("func main() {")), models.GenerateOptions{MaxNewTokens: 40})
	if err != nil {
		t.Fatal(err)
	}
	if greedy, _ := gen("--temperature", "0"); greedy != "func main() {"+string(idBytes(ids))+"\n" {
		t.Fatalf("greedy stdout %q, want %q", greedy, "func main() {"+string(idBytes(ids)))
	}
}

// TestGenerateHFGPT2 generates greedily from Hugging Face GPT-2 weights
// (the fixture, whose vocabulary is 256 bytes) and gets transformers'
// tokens.
func TestGenerateHFGPT2(t *testing.T) {
	dir, err := filepath.Abs(hfGPT2Fixture)
	if err != nil {
		t.Fatal(err)
	}
	all, stdout, code := runGotrain(t, 60*time.Second, "generate", "--checkpoint", dir, "--tokenizer", "bytes",
		"--prompt", string(hfGPT2Prompt), "--temperature", "0", "--max-new-tokens", "12")
	if code != 0 {
		t.Fatalf("exit code %d; output:\n%s", code, all)
	}
	if want := string(hfGPT2Prompt) + string(hfGPT2Greedy) + "\n"; stdout != want {
		t.Fatalf("stdout %q, want transformers' greedy %q", stdout, want)
	}
	if !strings.Contains(all, "(Hugging Face GPT-2): n_layer=2 n_head=2 n_embd=64 block_size=64 vocab_size=256") {
		t.Fatalf("want the model described; output:\n%s", all)
	}
}

// TestGenerateFromEndOfText: with GPT-2's tokenizer an empty prompt starts
// from <|endoftext|>, the text is the decoded tokens, and generation stops
// at the next end of text.
func TestGenerateFromEndOfText(t *testing.T) {
	tok, err := tokenizer.Load("gpt2")
	if err != nil {
		t.Fatal(err)
	}
	eot, ok := tok.EndOfText()
	if !ok {
		t.Fatal("gpt2 has no end-of-text token")
	}
	nn.SetSeed(4)
	m := models.GPT(models.GPTConfig{VocabSize: tok.VocabSize(), BlockSize: 8, NLayer: 1, NHead: 2, NEmbd: 8, Bias: true})
	path := filepath.Join(t.TempDir(), "gpt.safetensors")
	if err := checkpoint.Save(path, m); err != nil {
		t.Fatal(err)
	}
	opts := models.GenerateOptions{MaxNewTokens: 12, Temperature: 1, Seed: 5, Stop: []int{eot}}
	ids, err := models.Generate(context.Background(), m, []int{eot}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if ids[len(ids)-1] == eot {
		ids = ids[:len(ids)-1]
	}
	want, err := tok.Decode(ids)
	if err != nil {
		t.Fatal(err)
	}
	all, stdout, code := runGotrain(t, 60*time.Second, "generate", "--checkpoint", path, "--n-head", "2", "--tokenizer", "gpt2",
		"--prompt", "", "--max-new-tokens", "12", "--temperature", "1", "--top-k", "0", "--seed", "5")
	if code != 0 {
		t.Fatalf("exit code %d; output:\n%s", code, all)
	}
	if stdout != want+"\n" || want == "" {
		t.Fatalf("stdout %q, want %q", stdout, want+"\n")
	}
}

// TestGenerateBadInput: each mistake is one line and a non-zero exit,
// status 2 for a bad command line.
func TestGenerateBadInput(t *testing.T) {
	dir := t.TempDir()
	hf, err := filepath.Abs(hfGPT2Fixture)
	if err != nil {
		t.Fatal(err)
	}
	mlp := filepath.Join(dir, "mlp.safetensors")
	if err := checkpoint.Save(mlp, models.MLP()); err != nil {
		t.Fatal(err)
	}
	wide := filepath.Join(dir, "vocab300.safetensors")
	if err := checkpoint.Save(wide, models.GPT(models.GPTConfig{VocabSize: 300, BlockSize: 8, NLayer: 1, NHead: 2, NEmbd: 8, Bias: true})); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "none.safetensors")
	gen := func(args ...string) []string { return append([]string{"generate"}, args...) }
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{gen("--prompt", "x"), 2, "gotrain: --checkpoint: the model's weights are required (or --random-init SHAPE)"},
		{gen("--checkpoint", missing, "--prompt", "x"), 2, "gotrain: --checkpoint " + missing + ": no such file or directory"},
		{gen("--checkpoint", hf, "--random-init", "gpt2"), 2, "gotrain: --random-init: builds random weights: give it or --checkpoint, not both"},
		{gen("--random-init", "gpt5"), 2, "gotrain: --random-init gpt5: must be gpt2, gpt2-medium, gpt2-large or gpt2-xl"},
		{gen("--checkpoint", hf, "--temperature", "-1"), 2, "gotrain: --temperature -1: must be a finite number >= 0"},
		{gen("--checkpoint", hf, "--top-p", "0"), 2, "gotrain: --top-p 0: must be in (0, 1]"},
		{gen("--checkpoint", hf, "--top-k", "-1"), 2, "gotrain: --top-k -1: must be at least 0 (0 for all tokens)"},
		{gen("--checkpoint", hf, "--max-new-tokens", "0"), 2, "gotrain: --max-new-tokens 0: must be at least 1"},
		{gen("--checkpoint", hf, "extra"), 2, `gotrain: generate: unexpected argument "extra" (the prompt is --prompt)`},
		{gen("--checkpoint", hf, "--tokenizer", "bytes"), 2, "gotrain: --prompt: empty, and tokenizer bytes has no end-of-text token to start from"},
		{gen("--checkpoint", wide, "--n-head", "2", "--tokenizer", "bytes", "--prompt", "x"), 2, "gotrain: --tokenizer bytes: its vocabulary has 256 tokens, the model's 300"},
		{gen("--checkpoint", hf, "--tokenizer", filepath.Join(dir, "no-such-tokenizer.json"), "--prompt", "x"), 2, "gotrain: --tokenizer " + filepath.Join(dir, "no-such-tokenizer.json") + ": "},
		{gen("--checkpoint", mlp, "--prompt", "x"), 1, "gotrain: generate: models: " + mlp + " is not a GPT-2 checkpoint"},
	} {
		t.Run(strings.Join(tc.args[1:], " "), func(t *testing.T) {
			stdout, lines, code := runGenerateCmd(t, tc.args...)
			if code != tc.code || len(lines) != 1 || !strings.HasPrefix(lines[0], tc.want) || stdout != "" {
				t.Fatalf("exit code %d, stdout %q, stderr %q: want exit code %d and one line starting %q", code, stdout, lines, tc.code, tc.want)
			}
		})
	}
}

// byteIDs returns the bytes of b as token ids.
func byteIDs(b []byte) []int {
	ids := make([]int, len(b))
	for i, c := range b {
		ids[i] = int(c)
	}
	return ids
}

// idBytes returns byte token ids as bytes.
func idBytes(ids []int) []byte {
	b := make([]byte, len(ids))
	for i, id := range ids {
		b[i] = byte(id)
	}
	return b
}
