package main

import (
	"fmt"
	"math"
	"os"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/gotrain/gotrain/data/shards"
	"github.com/gotrain/gotrain/data/tokenizer"
	"github.com/gotrain/gotrain/jobs/jobflag"
)

// dataSubcommands are the commands of `gotrain data` besides prepare;
// each file that defines one appends its constructor in an init.
var dataSubcommands []func() *cobra.Command

// newDataCmd groups the commands about datasets (`gotrain data prepare`,
// and dataSubcommands).
func newDataCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "data COMMAND",
		Short: "Prepare datasets: token shards that training memory-maps",
		Args:  cobra.ArbitraryArgs,
		RunE:  unknownSubcommand,
	}
	cmd.AddCommand(newDataPrepareCmd())
	for _, sub := range dataSubcommands {
		cmd.AddCommand(sub())
	}
	return cmd
}

// dataPrepareFlags are the flags of `gotrain data prepare`.
type dataPrepareFlags struct {
	tokenizer   string
	out         string
	valFraction float64
	jsonlField  string
	shardTokens int64
	workers     int
}

// newDataPrepareCmd is `gotrain data prepare`.
func newDataPrepareCmd() *cobra.Command {
	var fl dataPrepareFlags
	cmd := &cobra.Command{
		Use:   "prepare --tokenizer SPEC --out DIR INPUT...",
		Short: "Encode text files, directories and JSONL into token shards (nanoGPT's train.bin/val.bin)",
		Long: `Encode documents with a tokenizer into a prepared dataset in --out: shards
of raw little-endian token ids (uint16 for vocabularies up to 65536, else
uint32; nanoGPT's train.bin layout) and index.json, written last, that
names the tokenizer, the vocabulary size and each shard with its split,
token count and SHA-256. 'gotrain train gpt --data DIR' trains on it.

An INPUT is a text file (one document), a .jsonl or .jsonl.gz file (one
document per line, in the field --jsonl-field) or a directory, whose files
are taken in name order (names starting with "." skipped). Each document
is followed by the tokenizer's end-of-text token if it has one. Every
document whose number i (from 0, in input order) has floor((i+1)·f) >
floor(i·f), with f = --val-fraction, goes to the val split; a lone
document (one text file) is split instead, its last f of tokens held out
(nanoGPT's shakespeare split).

--tokenizer is bytes, gpt2, cl100k_base, o200k_base, a tokenizer.json, a
*.tiktoken file or a directory with vocab.json and merges.txt.

Documents are encoded by --workers goroutines; the shards are the same
for any number. Progress goes to stderr, a summary line to stdout.
A bad input (a file that cannot be read, text that is not UTF-8, a JSONL
line that is not JSON or lacks the field) stops it with one line naming
file:line, and --out is then not a dataset (it has no index.json).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("data prepare: no INPUT: give text files, directories or .jsonl files")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return fl.run(cmd, args) },
	}
	f := cmd.Flags()
	f.StringVar(&fl.tokenizer, "tokenizer", "", "the tokenizer: bytes, gpt2, cl100k_base, o200k_base, a tokenizer.json, a *.tiktoken file or a vocab.json+merges.txt directory (required)")
	f.StringVar(&fl.out, "out", "", "the dataset's directory, created if missing; a dataset there is replaced (required)")
	f.Float64Var(&fl.valFraction, "val-fraction", 0.0005, "the fraction of documents held out as the val split, spread evenly (nanoGPT's openwebtext: 0.0005)")
	f.StringVar(&fl.jsonlField, "jsonl-field", "text", "the field of a JSONL line that holds its document")
	f.Int64Var(&fl.shardTokens, "shard-tokens", shards.DefaultShardTokens, "tokens per shard file")
	f.IntVar(&fl.workers, "workers", 0, "goroutines encoding documents (0: one per CPU)")
	return cmd
}

// check refuses the flags prepare would not run with.
func (fl *dataPrepareFlags) check() error {
	switch {
	case fl.tokenizer == "":
		return flagNeeds("tokenizer", "is required (bytes, gpt2, cl100k_base, o200k_base or a tokenizer file)")
	case fl.out == "":
		return flagNeeds("out", "is required: the dataset's directory")
	case !(fl.valFraction >= 0 && fl.valFraction < 1) || math.IsNaN(fl.valFraction):
		return badFlag("val-fraction", fl.valFraction, "must be at least 0 and below 1")
	case fl.jsonlField == "":
		return badFlag("jsonl-field", fl.jsonlField, "must name a field")
	case fl.shardTokens < 1:
		return badFlag("shard-tokens", fl.shardTokens, "must be at least 1")
	case fl.workers < 0:
		return badFlag("workers", fl.workers, "must be at least 0 (0: one per CPU)")
	}
	if st, err := os.Stat(fl.out); err == nil && !st.IsDir() {
		return badFlag("out", fl.out, "is a file, not a directory")
	}
	return nil
}

// run prepares the dataset.
func (fl *dataPrepareFlags) run(cmd *cobra.Command, inputs []string) error {
	if err := fl.check(); err != nil {
		return err
	}
	tok, err := tokenizer.Load(fl.tokenizer)
	if err != nil {
		return badFlag("tokenizer", fl.tokenizer, jobflag.RootCause(err))
	}
	workers := fl.workers
	if workers == 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	idx, st, err := shards.Prepare(cmd.Context(), fl.out, tok, inputs, shards.Options{
		Tokenizer: fl.tokenizer, ValFraction: fl.valFraction, JSONLField: fl.jsonlField,
		ShardTokens: fl.shardTokens, Workers: workers, Progress: cmd.ErrOrStderr()})
	if err != nil {
		return err
	}
	if st.ValDocuments == 0 && fl.valFraction > 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), "gotrain: no document held out for validation: %d documents at --val-fraction %v (the last of every %.0f is held out)\n",
			st.Documents, fl.valFraction, 1/fl.valFraction)
	}
	secs := max(st.Elapsed.Seconds(), 1e-9)
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "dataset=%s tokenizer=%s vocab_size=%d dtype=%s documents=%d train_tokens=%d val_tokens=%d shards=%d workers=%d mb_per_s=%.2f tokens_per_s=%.0f\n",
		fl.out, idx.Tokenizer, idx.VocabSize, idx.DType, st.Documents, st.TrainTokens, st.ValTokens, len(idx.Shards), workers,
		float64(st.Bytes)/1e6/secs, float64(st.TrainTokens+st.ValTokens)/secs)
	return err
}
