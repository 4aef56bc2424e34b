package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gotrain/gotrain/data/tokenizer"
)

// newTokenizerCmd is `gotrain tokenizer encode|decode|train|bench`.
func newTokenizerCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tokenizer COMMAND",
		Short: "Encode, decode and train byte-level BPE tokenizers (tiktoken, Hugging Face)",
		Long: `Tokenizer encodes text to token ids and back with byte-level BPE tokenizers
that give the same ids as tiktoken and Hugging Face tokenizers, and trains new
ones. --tokenizer takes bytes, a built-in encoding (gpt2, r50k_base,
cl100k_base, o200k_base), a tokenizer.json, a *.tiktoken rank file, a GPT-2
vocab.json (merges.txt beside it) or a directory holding either.`,
		Args: cobra.ArbitraryArgs,
		RunE: unknownSubcommand,
	}
	cmd.AddCommand(newTokenizerEncodeCmd(), newTokenizerDecodeCmd(), newTokenizerTrainCmd(), newTokenizerBenchCmd())
	return cmd
}

// loadTokenizer loads spec, making a missing or unreadable spec a usage
// error (the command line names it).
func loadTokenizer(spec string) (tokenizer.Tokenizer, error) {
	tk, err := tokenizer.Load(spec)
	if err != nil {
		// Load's errors start "tokenizer SPEC: ", which names the flag.
		return nil, usageError{"--" + err.Error()}
	}
	return tk, nil
}

func newTokenizerEncodeCmd() *cobra.Command {
	var spec, file string
	var special bool
	cmd := &cobra.Command{
		Use:   "encode [--tokenizer SPEC] [--file F | TEXT...]",
		Short: "Print the token ids of text (arguments joined by spaces, --file, or standard input)",
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if file != "" && len(args) > 0 {
				return usagef("tokenizer encode: give --file or text arguments, not both")
			}
			tk, err := loadTokenizer(spec)
			if err != nil {
				return err
			}
			var text string
			switch {
			case file != "":
				data, err := os.ReadFile(file)
				if err != nil {
					return usagef("tokenizer encode: --file %s: %v", file, unwrapPath(err))
				}
				text = string(data)
			case len(args) > 0:
				text = strings.Join(args, " ")
			default:
				data, err := io.ReadAll(cmd.InOrStdin())
				if err != nil {
					return fmt.Errorf("tokenizer encode: standard input: %w", err)
				}
				text = string(data)
			}
			var ids []int
			b, isBPE := tk.(*tokenizer.BPE)
			switch {
			case special && isBPE:
				ids = b.EncodeWithSpecial(text, b.SpecialTokens())
			case isBPE:
				ids = b.EncodeParallel(text, 0)
			default:
				ids = tk.Encode(text)
			}
			w := bufio.NewWriterSize(cmd.OutOrStdout(), 64<<10)
			var num []byte
			for i, id := range ids {
				if i > 0 {
					w.WriteByte(' ')
				}
				num = strconv.AppendInt(num[:0], int64(id), 10)
				w.Write(num)
			}
			w.WriteByte('\n')
			return w.Flush()
		},
	}
	cmd.Flags().StringVar(&spec, "tokenizer", "gpt2", "tokenizer: bytes, gpt2, r50k_base, cl100k_base, o200k_base, or a tokenizer.json, *.tiktoken, vocab.json or directory")
	cmd.Flags().StringVar(&file, "file", "", "encode the contents of this file")
	cmd.Flags().BoolVar(&special, "special", false, "encode special-token text (<|endoftext|>) as the special token's id, not as plain text")
	return cmd
}

func newTokenizerDecodeCmd() *cobra.Command {
	var spec string
	cmd := &cobra.Command{
		Use:   "decode [--tokenizer SPEC] [ID...]",
		Short: "Print the text of token ids (arguments, or whitespace-separated on standard input)",
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			tk, err := loadTokenizer(spec)
			if err != nil {
				return err
			}
			fields := args
			if len(fields) == 0 {
				data, err := io.ReadAll(cmd.InOrStdin())
				if err != nil {
					return fmt.Errorf("tokenizer decode: standard input: %w", err)
				}
				fields = strings.Fields(string(data))
			}
			ids := make([]int, len(fields))
			for i, f := range fields {
				id, err := strconv.Atoi(f)
				if err != nil {
					return usagef("tokenizer decode: %q is not a token id (want integers)", f)
				}
				ids[i] = id
			}
			text, err := tk.Decode(ids)
			if err != nil {
				return err
			}
			_, err = io.WriteString(cmd.OutOrStdout(), text+"\n")
			return err
		},
	}
	cmd.Flags().StringVar(&spec, "tokenizer", "gpt2", "tokenizer (see gotrain tokenizer --help)")
	return cmd
}

func newTokenizerTrainCmd() *cobra.Command {
	var vocabSize int
	var out, pattern string
	var specials []string
	cmd := &cobra.Command{
		Use:   "train --vocab-size N --out DIR FILE...",
		Short: "Train a byte-level BPE tokenizer on text files and save it as DIR/tokenizer.json",
		Long: `Train learns a byte-level BPE from the lines of the files, the way Hugging Face
tokenizers' BpeTrainer does (min_frequency 2), and writes DIR/tokenizer.json,
which tokenizers.Tokenizer.from_file loads; with the gpt2 pattern and no
special token but <|endoftext|> it also writes GPT-2's vocab.json and
merges.txt. Progress goes to standard error.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, files []string) error {
			if len(files) == 0 {
				return usagef("tokenizer train: no input files (want FILE...)")
			}
			if out == "" {
				return usagef("tokenizer train: --out DIR is required")
			}
			if err := checkAtLeast("vocab-size", vocabSize, 256+len(specials)); err != nil {
				return err
			}
			p, err := tokenizer.ParsePattern(pattern)
			if err != nil {
				return usagef("--pattern %s", err)
			}
			for _, f := range files {
				st, err := os.Stat(f)
				if err != nil {
					return usagef("tokenizer train: %s: %v", f, unwrapPath(err))
				}
				if st.IsDir() {
					return usagef("tokenizer train: %s is a directory (want text files)", f)
				}
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				return fmt.Errorf("tokenizer train: --out: %w", err)
			}
			stderr := cmd.ErrOrStderr()
			start := time.Now()
			var readErr error
			bpe, err := tokenizer.TrainWith(cmd.Context(), fileLines(files, &readErr), vocabSize, specials, tokenizer.TrainOptions{
				Pattern: p,
				Progress: func(merges, target int) {
					fmt.Fprintf(stderr, "tokenizer train: %d/%d merges (%.1fs)\n", merges, target, time.Since(start).Seconds())
				},
			})
			if readErr != nil {
				return fmt.Errorf("tokenizer train: %w", readErr)
			}
			if err != nil {
				return err
			}
			path := filepath.Join(out, "tokenizer.json")
			if err := bpe.SaveJSON(path); err != nil {
				return err
			}
			saved := path
			if gpt2Files(p, specials) {
				if err := bpe.SaveGPT2(out); err != nil {
					return err
				}
				saved += ", vocab.json, merges.txt"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "vocab_size=%d saved=%s\n", bpe.VocabSize(), saved)
			return nil
		},
	}
	cmd.Flags().IntVar(&vocabSize, "vocab-size", 0, "vocabulary size: special tokens, 256 bytes and the merges")
	cmd.Flags().StringVar(&out, "out", "", "directory to write tokenizer.json to")
	cmd.Flags().StringVar(&pattern, "pattern", "gpt2", "pre-tokenizer: gpt2, cl100k or o200k")
	cmd.Flags().StringArrayVar(&specials, "special", []string{"<|endoftext|>"}, "special token, repeatable (ids 0, 1, …)")
	return cmd
}

func gpt2Files(p tokenizer.Pattern, specials []string) bool {
	return p == tokenizer.PatternGPT2 && len(specials) <= 1 && (len(specials) == 0 || specials[0] == "<|endoftext|>")
}

// fileLines yields the lines of files, each with its newline; the first
// read error stops it and is stored in *errp.
func fileLines(files []string, errp *error) iter.Seq[string] {
	return func(yield func(string) bool) {
		for _, name := range files {
			f, err := os.Open(name)
			if err != nil {
				*errp = err
				return
			}
			r := bufio.NewReaderSize(f, 1<<20)
			for {
				line, err := r.ReadString('\n')
				if line != "" && !yield(line) {
					f.Close()
					return
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					f.Close()
					*errp = fmt.Errorf("%s: %w", name, err)
					return
				}
			}
			f.Close()
		}
	}
}

func newTokenizerBenchCmd() *cobra.Command {
	var spec string
	var threads int
	var minTime time.Duration
	cmd := &cobra.Command{
		Use:   "bench [--tokenizer SPEC] FILE",
		Short: "Measure encoding speed in MB/s on one thread and on all cores",
		Long: `Bench encodes FILE repeatedly for at least --min-time and prints MB/s: with a
cold piece cache (cold_mb_per_s: the first pass), on one thread with a warm
cache (mb_per_s_1) and split across --threads goroutines (mb_per_s_N).`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("tokenizer bench: want one FILE, got %d arguments", len(args))
			}
			if threads <= 0 {
				threads = runtime.GOMAXPROCS(0)
			}
			tk, err := loadTokenizer(spec)
			if err != nil {
				return err
			}
			b, ok := tk.(*tokenizer.BPE)
			if !ok {
				return usagef("tokenizer bench: --tokenizer %s is not a BPE tokenizer", spec)
			}
			data, err := os.ReadFile(args[0])
			if err != nil {
				return usagef("tokenizer bench: %s: %v", args[0], unwrapPath(err))
			}
			text := string(data)
			mb := float64(len(text)) / 1e6
			b.ResetCache()
			t0 := time.Now()
			n := len(b.Encode(text))
			cold := mb / time.Since(t0).Seconds()
			rate := func(f func()) float64 {
				start, reps := time.Now(), 0
				for reps == 0 || time.Since(start) < minTime {
					f()
					reps++
				}
				return mb * float64(reps) / time.Since(start).Seconds()
			}
			one := rate(func() { b.Encode(text) })
			all := rate(func() { b.EncodeParallel(text, threads) })
			fmt.Fprintf(cmd.OutOrStdout(), "tokenizer=%s bytes=%d tokens=%d cold_mb_per_s=%.2f mb_per_s_1=%.2f threads=%d mb_per_s_N=%.2f\n",
				spec, len(text), n, cold, one, threads, all)
			return nil
		},
	}
	cmd.Flags().StringVar(&spec, "tokenizer", "gpt2", "tokenizer (see gotrain tokenizer --help)")
	cmd.Flags().IntVar(&threads, "threads", 0, "goroutines for the parallel measurement (0: all cores)")
	cmd.Flags().DurationVar(&minTime, "min-time", 2*time.Second, "minimum time of each measurement")
	return cmd
}

// unwrapPath drops the operation and path of a *fs.PathError, which the
// message already names.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
