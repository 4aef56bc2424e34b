package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gotrain/gotrain/distributed"
	"github.com/spf13/cobra"
)

// benchWorkerEnv marks a process started by `gotrain bench <collective>`
// as one of its workers.
const benchWorkerEnv = "GOTRAIN_BENCH_WORKER"

func init() {
	for _, op := range []string{"allreduce", "broadcast", "allgather"} {
		var nproc int
		var sizes, algo string
		cmd := &cobra.Command{
			Use:   op,
			Short: "Measure " + op + " bandwidth between local worker processes",
			Long: "Starts --nproc local workers (this binary, with RANK, WORLD_SIZE, MASTER_ADDR,\n" +
				"MASTER_PORT and GOTRAIN_TOKEN set) and prints one line per size:\n" +
				"op= world= bytes= median_s= algbw_GBps= busbw_GBps= (nccl-tests definitions).",
			Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				sz, err := parseSizes(sizes)
				if err != nil {
					return err
				}
				if os.Getenv(benchWorkerEnv) == "1" {
					return benchWorker(cmd.Context(), op, sz, algo, cmd.OutOrStdout())
				}
				return benchLaunch(cmd.Context(), op, nproc, cmd.OutOrStdout())
			},
		}
		cmd.Flags().IntVar(&nproc, "nproc", 2, "number of local worker processes")
		cmd.Flags().StringVar(&sizes, "sizes", "4096,65536,1048576,16777216,67108864", "comma-separated message sizes in bytes")
		cmd.Flags().StringVar(&algo, "algo", "", "force an allreduce algorithm (ring, recursive-doubling)")
		benchCmd.AddCommand(cmd)
	}
}

func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("bench: bad size %q in --sizes", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// benchLaunch re-runs this binary as nproc workers with the torchrun
// environment contract and relays rank 0's output.
func benchLaunch(ctx context.Context, op string, nproc int, out io.Writer) error {
	if nproc < 1 {
		return fmt.Errorf("bench: --nproc %d, want at least 1", nproc)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench: find this executable: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("bench: pick a master port: %w", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	tok := make([]byte, 16)
	rand.Read(tok)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, nproc)
	var outMu sync.Mutex
	for r := 0; r < nproc; r++ {
		cmd := exec.CommandContext(ctx, exe, os.Args[1:]...)
		cmd.Env = append(os.Environ(),
			benchWorkerEnv+"=1",
			"RANK="+strconv.Itoa(r), "LOCAL_RANK="+strconv.Itoa(r),
			"WORLD_SIZE="+strconv.Itoa(nproc), "LOCAL_WORLD_SIZE="+strconv.Itoa(nproc),
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port),
			"GOTRAIN_TOKEN="+hex.EncodeToString(tok),
		)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("bench: start worker %d: %w", r, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if r == 0 {
					outMu.Lock()
					fmt.Fprintln(out, sc.Text())
					outMu.Unlock()
				}
			}
			if err := cmd.Wait(); err != nil {
				errs[r] = fmt.Errorf("worker %d: %w: %s", r, err, strings.TrimSpace(stderr.String()))
				cancel() // one failed worker fails the run
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
	}
	return nil
}

// benchWorker is one rank: it times the collective at each size and rank
// 0 prints the median.
func benchWorker(ctx context.Context, op string, sizes []int, algo string, out io.Writer) error {
	g, err := distributed.Init(ctx, distributed.Config{AllReduceAlgo: algo})
	if err != nil {
		return err
	}
	defer g.Destroy()
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
