package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
)

// newBenchTrainCmd is `gotrain bench train`.
func newBenchTrainCmd() *cobra.Command {
	var nproc, rounds int
	cmd := &cobra.Command{
		Use:   "train [flags] -- [gotrain train mnist flags]",
		Short: "Measure data-parallel scaling: one process against N workers, alternating",
		Long: `Runs 'gotrain train mnist' alternately as one process with one thread and as
--nproc workers (one thread each, as the launcher sets), --rounds times each,
and prints one line per round and a summary:

  round= single_sps= ddp_sps= scaling=
  model= world= rounds= single_sps_median= ddp_sps_median= scaling_median= scaling_min= scaling_max=

scaling is the N-worker throughput over the single process's, measured in the
same round so that drift on a shared machine hits both. The order within a
round alternates too. Flags after -- go to every 'gotrain train mnist' run,
for example: gotrain bench train --rounds 5 -- --model cnn --max-steps 300`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return benchTrain(cmd.Context(), nproc, rounds, args, cmd.OutOrStdout())
		},
	}
	cmd.Flags().IntVar(&nproc, "nproc", 2, "number of local workers to compare with one process")
	cmd.Flags().IntVar(&rounds, "rounds", 3, "number of single/N-worker pairs to run")
	return cmd
}

// benchTrain runs the scaling comparison and prints its lines to out.
func benchTrain(ctx context.Context, nproc, rounds int, trainArgs []string, out io.Writer) error {
	if nproc < 2 {
		return badFlag("nproc", nproc, "must be at least 2, workers to compare with one process")
	}
	if err := checkAtLeast("rounds", rounds, 1); err != nil {
		return err
	}
	for _, a := range trainArgs {
		if a == "--nproc-per-node" || strings.HasPrefix(a, "--nproc-per-node=") {
			return flagNeeds("nproc-per-node", "is set by bench train; use --nproc")
		}
	}
	// Refuse a bad flag for the runs now, not after the first round.
	for _, n := range []string{"1", strconv.Itoa(nproc)} {
		if err := checkTrainArgs("mnist", slices.Concat(trainArgs, []string{"--nproc-per-node", n})); err != nil {
			return err
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench train: find this executable: %w", err)
	}
	single := slices.Concat([]string{"train", "mnist"}, trainArgs, []string{"--progress=false"})
	// runs[0] is the single process, runs[1] the N workers.
	runs := [2][]string{single, slices.Concat(single, []string{"--nproc-per-node", strconv.Itoa(nproc)})}
	var singles, ddps, scalings []float64
	var model string
	for r := 1; r <= rounds; r++ {
		// Alternate which goes first, so a trend in the machine's load
		// does not always favour the same side.
		order := []int{0, 1}
		if r%2 == 0 {
			order = []int{1, 0}
		}
		var sps [2]float64
		for _, i := range order {
			kv, err := runTrainSummary(ctx, exe, runs[i])
			if err != nil {
				return fmt.Errorf("bench train: round %d: %w", r, err)
			}
			v, err := strconv.ParseFloat(kv["samples_per_s"], 64)
			if err != nil || v <= 0 {
				return fmt.Errorf("bench train: round %d: no samples_per_s in the summary %v", r, kv)
			}
			sps[i], model = v, kv["model"]
		}
		s := sps[1] / sps[0]
		singles, ddps, scalings = append(singles, sps[0]), append(ddps, sps[1]), append(scalings, s)
		fmt.Fprintf(out, "round=%d single_sps=%.0f ddp_sps=%.0f scaling=%.3f\n", r, sps[0], sps[1], s)
	}
	fmt.Fprintf(out, "model=%s world=%d rounds=%d single_sps_median=%.0f ddp_sps_median=%.0f scaling_median=%.3f scaling_min=%.3f scaling_max=%.3f\n",
		model, nproc, rounds, median(singles), median(ddps), median(scalings), slices.Min(scalings), slices.Max(scalings))
	return nil
}

// runTrainSummary runs `gotrain args...` and parses the key=value fields
// of its last output line. The single process gets one compute thread,
// as each of the launcher's workers does when they fill the host.
func runTrainSummary(ctx context.Context, exe string, args []string) (map[string]string, error) {
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = append(os.Environ(), "GOTRAIN_NUM_THREADS=1", "OMP_NUM_THREADS=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("gotrain %s: %w: %s", strings.Join(args, " "), err, lastLines(stderr.String(), 5))
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	kv := map[string]string{}
	for _, f := range strings.Fields(lines[len(lines)-1]) {
		if k, v, ok := strings.Cut(f, "="); ok {
			kv[k] = v
		}
	}
	return kv, nil
}

// lastLines is the end of a worker's error output, for an error message.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// median of xs (not modified).
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
