package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testlog"
	"github.com/gotrain/gotrain/internal/testproc"
	"github.com/gotrain/gotrain/testing/clustertest"
)

// TestClusterBenchHierarchical: `gotrain bench allreduce --hosts` with two
// ranks on each of two hosts runs the hierarchical allreduce (auto picks
// it: two nodes, two ranks each) and prints rank 0's results for the
// world of four.
func TestClusterBenchHierarchical(t *testing.T) {
	c := newCluster(t, 2, clustertest.Options{})
	sizes := []string{"4096", "9437184"} // 9 MiB: the leaders take it in three chunks
	args := append([]string{"bench", "allreduce", "--hosts", hostList(c, 2), "--sizes", strings.Join(sizes, ",")}, c.SSHFlags()...)
	all, stdout, code := runGotrain(t, 90*time.Second, args...)
	if code != 0 {
		t.Fatalf("exit code %d:\n%s", code, all)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != len(sizes) {
		t.Fatalf("stdout has %d lines, want one per size:\n%s", len(lines), stdout)
	}
	for i, size := range sizes {
		f := strings.Fields(lines[i])
		if len(f) != 6 || f[0] != "op=allreduce" || f[1] != "world=4" || f[2] != "bytes="+size {
			t.Errorf("line %d: %q, want op=allreduce world=4 bytes=%s …", i, lines[i], size)
		}
		if want := fmt.Sprintf("bench: allreduce bytes=%s algo=hierarchical nodes=2", size); !strings.Contains(all, want) {
			t.Errorf("the output does not say %q:\n%s", want, all)
		}
	}
}

// BenchmarkClusterHierAllreduce: the flat ring against the hierarchical
// allreduce, `gotrain bench allreduce --hosts … --algo ring|hierarchical`
// with two ranks on each of 2 and of 3 hosts, on the shaped link (1
// Gbit/s each way, tbf), and PyTorch's gloo in the same network
// namespaces when $HIER_BENCH_PY names a Python with torch
// (docs/bench/hier_allreduce.sh sets it). Sizes are $HIER_BENCH_SIZES
// (bytes, comma-separated), else 16 and 64 MiB. Metrics per size: busbw
// in GB/s of each, hierarchical/flat (target ≥ 1.4) and
// hierarchical/gloo.
func BenchmarkClusterHierAllreduce(b *testing.B) {
	sizeArgs := "16777216,67108864"
	if s := os.Getenv("HIER_BENCH_SIZES"); s != "" {
		sizeArgs = s
	}
	sizes, err := parseSizes(sizeArgs)
	if err != nil {
		b.Fatal(err)
	}
	py := os.Getenv("HIER_BENCH_PY")
	if py != "" && exec.Command(py, "-c", "import torch.distributed").Run() != nil {
		b.Fatalf("HIER_BENCH_PY=%s does not import torch.distributed", py)
	}
	if py == "" {
		b.Log("HIER_BENCH_PY is not set: gloo is not measured")
	}
	script, err := filepath.Abs("testdata/gloo_allreduce.py")
	if err != nil {
		b.Fatal(err)
	}
	bin := buildGotrain(b)
	for _, hosts := range []int{2, 3} {
		b.Run(fmt.Sprintf("%dx2", hosts), func(b *testing.B) {
			c := clustertest.New(b, clustertest.Options{Hosts: hosts})
			shapeLink(b, c)
			for i := 0; i < b.N; i++ {
				bw := map[string]map[int]float64{}
				for _, algo := range []string{"ring", "hierarchical"} {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
					args := append([]string{"bench", "allreduce", "--hosts", hostList(c, 2), "--sizes", sizeArgs, "--algo", algo}, c.SSHFlags()...)
					cmd := exec.CommandContext(ctx, bin, args...)
					cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, testproc.WorkerEnv+"=") })
					out, err := cmd.CombinedOutput()
					cancel()
					if err != nil {
						b.Fatalf("gotrain bench allreduce --algo %s: %v\n%s", algo, err, out)
					}
					for _, s := range sizes {
						if want := fmt.Sprintf("bench: allreduce bytes=%d algo=%s nodes=%d", s, algo, hosts); !strings.Contains(string(out), want) {
							b.Fatalf("the output does not say %q:\n%s", want, out)
						}
					}
					bw[algo] = busbw(b, string(out))
				}
				if py != "" {
					bw["gloo"] = glooInNamespaces(b, c, py, script, strings.Split(sizeArgs, ","))
				}
				for _, s := range sizes {
					flat, hier := bw["ring"][s], bw["hierarchical"][s]
					if flat == 0 || hier == 0 {
						b.Fatalf("no result for %d bytes: %v", s, bw)
					}
					tag := fmt.Sprintf("%dB", s)
					if s%(1<<20) == 0 {
						tag = fmt.Sprintf("%dMiB", s>>20)
					}
					b.ReportMetric(flat, "flat_busbw_GBps_"+tag)
					b.ReportMetric(hier, "hier_busbw_GBps_"+tag)
					b.ReportMetric(hier/flat, "hier_over_flat_"+tag)
					if g := bw["gloo"][s]; g > 0 {
						b.ReportMetric(g, "gloo_busbw_GBps_"+tag)
						b.ReportMetric(hier/g, "hier_over_gloo_"+tag)
					}
				}
			}
		})
	}
}

// glooInNamespaces runs gloo_allreduce.py as two ranks in each host's
// network namespace of c (ip netns exec: the host's network, this
// machine's files, where py lives) and returns rank 0's busbw by size.
func glooInNamespaces(b *testing.B, c *clustertest.Cluster, py, script string, sizeArgs []string) map[int]float64 {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	world := 2 * len(c.Hosts)
	cmds := make([]*exec.Cmd, world)
	var out0 testlog.Buffer
	for r := range cmds {
		h := c.Hosts[r/2]
		cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.NetNS, py, script}, sizeArgs...)...)
		cmd.Env = append(os.Environ(), "RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(world),
			"LOCAL_RANK="+strconv.Itoa(r%2), "MASTER_ADDR="+c.Hosts[0].Addr, "MASTER_PORT=29502",
			"GLOO_SOCKET_IFNAME="+h.Dev, "OMP_NUM_THREADS=1")
		var out io.Writer = io.Discard
		if r == 0 {
			out = &out0
		}
		cmd.Stdout, cmd.Stderr = out, out
		cmd.WaitDelay = 5 * time.Second
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		cmds[r] = cmd
	}
	var errs []error
	for r, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("gloo rank %d: %w", r, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		b.Fatalf("%v\nrank 0:\n%s", err, out0.String())
	}
	return busbw(b, out0.String())
}
