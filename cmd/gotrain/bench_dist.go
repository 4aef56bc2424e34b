package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/distributed/tlsconf"
	"github.com/gotrain/gotrain/launch"
	"github.com/gotrain/gotrain/launch/fanout"
	"github.com/gotrain/gotrain/launch/ssh"
)

// benchWorkerEnv marks a process started by `gotrain bench <collective>`
// as one of its workers.
const benchWorkerEnv = "GOTRAIN_BENCH_WORKER"

// newBenchCollectiveCmd is `gotrain bench allreduce|broadcast|allgather`.
func newBenchCollectiveCmd(op string) *cobra.Command {
	var nproc int
	var sizes, algo string
	var hf hostFlags
	var tlsf tlsFlags
	cmd := &cobra.Command{
		Use:   op,
		Short: "Measure " + op + " bandwidth between worker processes, on this machine or several",
		Long: "Starts --nproc local workers (this binary, under the launcher of 'gotrain run\n" +
			"--standalone'), or with --hosts/--hostfile workers on those machines over ssh\n" +
			"(one per slot, or --nproc per host, as 'gotrain run --hosts'), and prints one\n" +
			"line per size:\n" +
			"op= world= bytes= median_s= algbw_GBps= busbw_GBps= (nccl-tests definitions).",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sz, err := parseSizes(sizes)
			if err != nil {
				return err
			}
			if err := checkAtLeast("nproc", nproc, 1); err != nil {
				return err
			}
			algos := []string{distributed.AlgoAuto, distributed.AlgoRing, distributed.AlgoRecursiveDoubling, distributed.AlgoShm, distributed.AlgoHierarchical}
			if err := checkOneOf("algo", algo, append([]string{""}, algos...)...); err != nil {
				return badFlag("algo", algo, "must be "+orList(algos))
			}
			if err := tlsf.check(hf.applies(cmd.Flags())); err != nil {
				return err
			}
			tlsf.export()
			if os.Getenv(benchWorkerEnv) == "1" {
				return benchWorker(cmd.Context(), op, sz, algo, cmd.OutOrStdout())
			}
			if hf.applies(cmd.Flags()) {
				return benchOnHosts(cmd.Context(), cmd.Flags(), hf, nproc)
			}
			return benchLaunch(cmd.Context(), nproc, cmd.OutOrStdout())
		},
	}
	cmd.Flags().IntVar(&nproc, "nproc", 2, "number of local worker processes")
	cmd.Flags().StringVar(&sizes, "sizes", "4096,65536,1048576,16777216,67108864", "comma-separated message sizes in bytes")
	cmd.Flags().StringVar(&algo, "algo", "", "force an algorithm: ring, recursive-doubling, shm or hierarchical (default auto; hierarchical also applies to broadcast and allgather)")
	hf.registerTrain(cmd.Flags())
	tlsf.register(cmd.Flags())
	return cmd
}

// parseSizes parses --sizes, byte counts of at least 0.
func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			return nil, badFlag("sizes", s, fmt.Sprintf("%q is not a size in bytes (want comma-separated integers of at least 0)", f))
		}
		out = append(out, n)
	}
	return out, nil
}

// benchLaunch re-runs this command as nproc workers under the launcher
// and copies rank 0's output (the results) to out, without the
// launcher's rank prefix.
func benchLaunch(ctx context.Context, nproc int, out io.Writer) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench: find this executable: %w", err)
	}
	cfg := launch.Config{
		Program: exe, Args: os.Args[1:], NProcPerNode: nproc, Standalone: true,
		Env:    append(os.Environ(), benchWorkerEnv+"=1"),
		Stdout: rankZeroLines{out},
	}
	outputFlags{}.setupLauncherLog(&cfg)
	code, err := launch.Run(ctx, cfg)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if code != 0 {
		return exitCodeError(code)
	}
	return nil
}

// benchOnHosts re-runs this command as workers on the hosts of h (slots
// per host, or --nproc when given) and prints rank 0's results.
func benchOnHosts(ctx context.Context, f *pflag.FlagSet, h hostFlags, nproc int) error {
	hs, err := h.check(f)
	if err != nil {
		return err
	}
	n := 0
	if f.Changed("nproc") {
		n = nproc // checked by the caller
	}
	if h.masterPort <= 0 || h.masterPort > 65535 {
		return badFlag("master-port", h.masterPort, "must be in [1, 65535]")
	}
	program := h.remoteGotrain
	if program == "" {
		if program, err = os.Executable(); err != nil {
			return fmt.Errorf("bench: find this executable: %w", err)
		}
	}
	cfg := fanout.Config{
		Hosts: hs, SSH: ssh.Client{Options: h.sshOptions}, Gotrain: h.remoteGotrain,
		Program: program, Args: os.Args[1:], NProcPerNode: n, MasterPort: h.masterPort, ExitWait: h.exitWait,
	}
	results := func(w io.Writer) io.Writer { return rankZeroLines{w} }
	return launchOnHosts(ctx, cfg, h, outputFlags{}, nil, defaultLogEvery, false, results, benchWorkerEnv+"=1")
}

// rankZeroLines passes on rank 0's lines without the launcher's
// "[rank0]: " prefix and drops the other ranks' (only rank 0 prints
// results). The launcher writes whole lines only.
type rankZeroLines struct{ w io.Writer }

func (z rankZeroLines) Write(p []byte) (int, error) {
	for line := range bytes.Lines(p) {
		if rest, ok := bytes.CutPrefix(line, []byte("[rank0]: ")); ok {
			if _, err := z.w.Write(rest); err != nil {
				return 0, err
			}
		}
	}
	return len(p), nil
}

// benchWorker is one rank: it times the collective at each size and rank
// 0 prints the median.
func benchWorker(ctx context.Context, op string, sizes []int, algo string, out io.Writer) error {
	g, err := distributed.Init(ctx, distributed.Config{AllReduceAlgo: algo})
	if err != nil {
		return err
	}
	defer g.Destroy()
	if g.Rank() == 0 && tlsconf.Negotiated() != "" {
		fmt.Fprintf(os.Stderr, "bench: data plane over %s\n", tlsconf.Negotiated())
	}
	n := g.Size()
	for _, nbytes := range sizes {
		count := nbytes / 4
		var run func() error
		switch op {
		case "allreduce":
			buf := make([]float32, count)
			for i := range buf {
				buf[i] = float32(i%1000) * 1e-3
			}
			run = func() error { return g.AllReduce(ctx, buf, distributed.Sum) }
		case "broadcast":
			buf := make([]float32, count)
			run = func() error { return g.Broadcast(ctx, buf, 0) }
		case "allgather":
			per := count / n
			dst, src := make([]float32, per*n), make([]float32, per)
			run = func() error { return g.AllGather(ctx, dst, src) }
		}
		if g.Rank() == 0 && op == "allreduce" {
			// On stderr: stdout holds only the result lines.
			fmt.Fprintf(os.Stderr, "bench: allreduce bytes=%d algo=%s nodes=%d\n", nbytes, g.AllReduceAlgorithm(nbytes), len(g.Nodes()))
		}
		iters := max(3, min(200, int(2e8/float64(max(nbytes, 1)))))
		for i := 0; i < 2; i++ {
			if err := run(); err != nil {
				return err
			}
		}
		if err := g.Barrier(ctx); err != nil {
			return err
		}
		ts := make([]float64, iters)
		for i := range ts {
			start := time.Now()
			if err := run(); err != nil {
				return err
			}
			ts[i] = time.Since(start).Seconds()
		}
		slices.Sort(ts)
		med := ts[len(ts)/2]
		if len(ts)%2 == 0 {
			med = (ts[len(ts)/2-1] + ts[len(ts)/2]) / 2
		}
		algbw := float64(nbytes) / med / 1e9
		busbw := algbw
		switch op {
		case "allreduce":
			busbw = algbw * 2 * float64(n-1) / float64(n)
		case "allgather":
			busbw = algbw * float64(n-1) / float64(n)
		}
		if g.Rank() == 0 {
			fmt.Fprintf(out, "op=%s world=%d bytes=%d median_s=%.6f algbw_GBps=%.3f busbw_GBps=%.3f\n",
				op, n, nbytes, med, algbw, busbw)
		}
	}
	return g.Barrier(ctx)
}
