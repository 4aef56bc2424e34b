package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gotrain/gotrain/checkpoint"
)

// newCheckpointCmd groups the checkpoint tools (`gotrain checkpoint
// consolidate|inspect`).
func newCheckpointCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "checkpoint COMMAND",
		Short: "Inspect checkpoints and consolidate sharded ones into one model file",
		Args:  cobra.ArbitraryArgs,
		RunE:  unknownSubcommand,
	}
	cmd.AddCommand(newCheckpointConsolidateCmd(), newCheckpointInspectCmd())
	return cmd
}

// newCheckpointConsolidateCmd is `gotrain checkpoint consolidate DIR -o
// model.safetensors`.
func newCheckpointConsolidateCmd() *cobra.Command {
	var out string
	var allowNonFinite bool
	cmd := &cobra.Command{
		Use:   "consolidate DIR -o model.safetensors",
		Short: "Write a sharded checkpoint's model as one safetensors file that PyTorch loads",
		Long: `Assemble the model's tensors of the newest save in a sharded checkpoint
directory DIR (the save DIR/latest names, or DIR itself if it holds an
index.json) from its shard files, and write them, under the model's own
state-dict names, as one safetensors file: in PyTorch,
model.load_state_dict(safetensors.torch.load_file("model.safetensors")).
Optimizer state is left out. Every shard file must be in the save's
directory (copy them there from each host first). DIR may also be a
single-file training state (*.train.safetensors), whose model is written.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("checkpoint consolidate: want one argument, the checkpoint directory (got %d)", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case out == "":
				return flagNeeds("output", "the model file to write (-o model.safetensors) is required")
			case !strings.EqualFold(filepath.Ext(out), ".safetensors"):
				return badFlag("output", out, "must name a .safetensors file")
			}
			if err := checkSavePath("output", out); err != nil {
				return err
			}
			var opts []checkpoint.Option
			if allowNonFinite {
				opts = append(opts, checkpoint.AllowNonFinite())
			}
			if err := checkpoint.ConsolidateModel(args[0], out, opts...); err != nil {
				return err
			}
			entries, _, err := checkpoint.ReadTensorsFile(out, opts...)
			if err != nil {
				return err
			}
			var n int64
			for _, e := range entries {
				n += int64(e.Tensor.Len())
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: %d tensors, %d values\n", out, len(entries), n)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "the safetensors file to write")
	cmd.Flags().BoolVar(&allowNonFinite, "allow-non-finite", false, "accept NaN and infinite values")
	return cmd
}

// newCheckpointInspectCmd is `gotrain checkpoint inspect DIR`.
func newCheckpointInspectCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "inspect DIR|FILE",
		Short: "Describe a checkpoint: its shards, step, world size, strategy and coverage",
		Long: `Describe the newest save in a sharded checkpoint directory: its step,
strategy and world size, its tensors, and each shard file (rank, bytes,
pieces) with whether the file here is sound (size and CRC-32C as the index
records them), and whether the shards cover every tensor exactly. Exits 1
if a shard is missing or corrupt or a tensor is not fully covered.

Given a safetensors file (a model file or a training state), list its
tensors and what its metadata says.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("checkpoint inspect: want one argument, the checkpoint directory or file (got %d)", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			fi, err := os.Stat(args[0])
			if err != nil {
				return fmt.Errorf("checkpoint inspect: %w", err)
			}
			if !fi.IsDir() {
				return inspectFile(cmd.OutOrStdout(), args[0])
			}
			info, err := checkpoint.InspectSharded(args[0])
			if err != nil {
				return err
			}
			return printSharded(cmd.OutOrStdout(), info)
		},
	}
}

// printSharded writes what inspect says of a sharded save, and returns
// an error if it is damaged.
func printSharded(w io.Writer, info *checkpoint.ShardedInfo) error {
	ix := info.Index
	var model, optim int
	var values int64
	for key, t := range ix.Tensors {
		if checkpoint.IsModelKey(key) {
			model++
		} else {
			optim++
		}
		n := int64(1)
		for _, d := range t.Shape {
			n *= int64(d)
		}
		values += n
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "save\t%s\n", info.Dir)
	fmt.Fprintf(tw, "step\t%d\n", ix.Step)
	fmt.Fprintf(tw, "strategy\t%s\n", orDash(ix.Strategy))
	fmt.Fprintf(tw, "world size\t%d\n", ix.WorldSize)
	fmt.Fprintf(tw, "tensors\t%d (%d model, %d optimizer), %d values\n", len(ix.Tensors), model, optim, values)
	if len(info.Problems) == 0 {
		fmt.Fprintf(tw, "coverage\tevery tensor fully covered\n")
	} else {
		fmt.Fprintf(tw, "coverage\t%d problem(s):\n", len(info.Problems))
		for _, p := range info.Problems {
			fmt.Fprintf(tw, "\t  %s\n", p)
		}
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FILE\tRANK\tBYTES\tPIECES\tSTATUS")
	damaged := 0
	for i, sh := range ix.Shards {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\n", sh.File, sh.Rank, sh.Bytes, len(sh.Pieces), info.Shards[i])
		if info.Shards[i] != "ok" {
			damaged++
		}
	}
	tw.Flush()
	if writers := len(ix.Shards); writers < ix.WorldSize {
		fmt.Fprintf(w, "(%d of %d ranks wrote a shard; the others held only replicas)\n", writers, ix.WorldSize)
	}
	if damaged > 0 || len(info.Problems) > 0 {
		return fmt.Errorf("checkpoint inspect: %s cannot be loaded: %d shard file(s) missing or corrupt here, %d coverage problem(s)",
			info.Dir, damaged, len(info.Problems))
	}
	return nil
}

// inspectFile describes a single safetensors file.
func inspectFile(w io.Writer, path string) error {
	entries, meta, err := checkpoint.ReadTensorsFile(path, checkpoint.AllowNonFinite())
	if err != nil {
		return err
	}
	kind := "safetensors model file"
	switch {
	case meta["gotrain.training"] != "":
		kind = "gotrain training state (SaveTraining)"
	case meta["gotrain.sharded"] != "":
		kind = "shard of a sharded checkpoint (rank " + meta["rank"] + " of " + meta["world_size"] + ")"
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "file\t%s\n", path)
	fmt.Fprintf(tw, "kind\t%s\n", kind)
	for _, k := range []string{"step", "epoch"} {
		if v, ok := meta[k]; ok {
			fmt.Fprintf(tw, "%s\t%s\n", k, v)
		}
	}
	_, summed := meta[checkpoint.ChecksumKey]
	fmt.Fprintf(tw, "checksums\t%s\n", map[bool]string{true: "CRC-32C of every tensor, verified", false: "none (not written by gotrain)"}[summed])
	fmt.Fprintf(tw, "tensors\t%d\n", len(entries))
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tDTYPE\tSHAPE")
	slices.SortFunc(entries, func(a, b checkpoint.Entry) int { return strings.Compare(a.Name, b.Name) })
	for _, e := range entries {
		fmt.Fprintf(tw, "%s\t%s\t%v\n", e.Name, e.DType, e.Tensor.Shape())
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
