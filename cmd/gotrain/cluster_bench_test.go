package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/internal/testlog"
	"github.com/gotrain/gotrain/internal/testproc"
	"github.com/gotrain/gotrain/testing/clustertest"
)

// The cluster benchmarks measure gotrain between two hosts of a
// clustertest (network namespaces on a bridge), each run once per b.N:
//
//	go test ./cmd/gotrain -run '^$' -bench BenchmarkCluster -benchtime 1x -v
//
// They need root, iproute2, nftables and openssh-server, and for the gloo
// comparison /usr/bin/python3 with torch. The shaped link is 1 Gbit/s
// each way (tbf) with 0.5 ms of delay each way when the kernel has netem
// (the log says whether it does).

// shapedRate is the shaped link's rate, in bits per second.
const shapedRate = 1e9

// shapeLink shapes both hosts of c as the benchmarks' shaped link.
func shapeLink(b *testing.B, c *clustertest.Cluster) {
	b.Helper()
	delay := 500 * time.Microsecond
	if !clustertest.HasDelay() {
		b.Logf("this kernel has no netem qdisc: the shaped link is 1 Gbit/s without the 0.5 ms delay")
		delay = 0
	}
	for _, h := range c.Hosts {
		h.Shape(b, shapedRate, delay)
	}
}

// onHosts runs one process per host of c, rank r on host r, given by
// argv and env, and returns each one's combined output. It fails b if
// any fails or all have not finished within limit. With ready set, rank
// 0 starts first and the others once its output holds ready.
func onHosts(b *testing.B, c *clustertest.Cluster, limit time.Duration, ready string, argv func(r int) []string, env func(r int) []string) []string {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	outs := make([]*output, len(c.Hosts))
	errs := make([]error, len(c.Hosts))
	var wg sync.WaitGroup
	exited := make(chan struct{})
	for r, h := range c.Hosts {
		if r == 1 && ready != "" && !outs[0].waitFor(limit, func(s string) bool {
			select {
			case <-exited:
				return true
			default:
				return strings.Contains(s, ready)
			}
		}) {
			b.Fatalf("rank 0 on %s did not print %q within %v:\n%s", c.Hosts[0].Name, ready, limit, outs[0].String())
		}
		a := argv(r)
		cmd := h.Command(ctx, a[0], a[1:]...)
		cmd.Env = append(os.Environ(), env(r)...)
		outs[r] = newOutput(nil)
		cmd.Stdout, cmd.Stderr = outs[r], outs[r]
		cmd.WaitDelay = 5 * time.Second
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = cmd.Wait()
			if r == 0 {
				close(exited)
				outs[0].bell.ring()
			}
		}()
	}
	wg.Wait()
	res := make([]string, len(c.Hosts))
	for r := range c.Hosts {
		res[r] = outs[r].String()
	}
	for r, err := range errs {
		if err != nil {
			b.Fatalf("rank %d on %s: %v\n%s", r, c.Hosts[r].Name, err, res[r])
		}
	}
	return res
}

// rankEnv is torchrun's contract for rank r of a job of one worker per
// host of c, node 0 serving the store on port.
func rankEnv(c *clustertest.Cluster, r, port int) []string {
	return []string{"RANK=" + strconv.Itoa(r), "LOCAL_RANK=0", "WORLD_SIZE=" + strconv.Itoa(len(c.Hosts)),
		"LOCAL_WORLD_SIZE=1", "GROUP_RANK=" + strconv.Itoa(r), "MASTER_ADDR=" + c.Hosts[0].Addr,
		"MASTER_PORT=" + strconv.Itoa(port), "GOTRAIN_TOKEN=0123456789abcdef0123456789abcdef",
		"GOTRAIN_RUN_ID=bench", "GOTRAIN_SHM=0", "GLOO_SOCKET_IFNAME=" + c.Hosts[r].Dev}
}

// busbw parses bench lines (op= world= bytes= … busbw_GBps=) into
// bytes → busbw in GB/s.
func busbw(b *testing.B, out string) map[int]float64 {
	b.Helper()
	m := map[int]float64{}
	for l := range strings.Lines(out) {
		kv := map[string]string{}
		for _, f := range strings.Fields(strings.TrimPrefix(l, "[rank0]: ")) {
			if k, v, ok := strings.Cut(f, "="); ok {
				kv[k] = v
			}
		}
		n, err1 := strconv.Atoi(kv["bytes"])
		bw, err2 := strconv.ParseFloat(kv["busbw_GBps"], 64)
		if kv["op"] == "allreduce" && err1 == nil && err2 == nil {
			m[n] = bw
		}
	}
	return m
}

// hasTorch reports whether /usr/bin/python3 imports torch.
func hasTorch() bool {
	return exec.Command("/usr/bin/python3", "-c", "import torch.distributed").Run() == nil
}

// BenchmarkClusterAllreduce: `gotrain bench allreduce --hosts` (one rank
// per host, over ssh) and PyTorch's gloo (started as a scheduler starts
// it) on the
// same two hosts, at 16 and 64 MiB, on plain veth and on the shaped link.
// Metrics: busbw in GB/s of each, gotrain/gloo, the link's own ceiling
// (both ends sending and receiving the same bytes on one TCP connection,
// nothing else: a two-rank allreduce cannot beat it) and gotrain's share
// of it, and on the shaped link gotrain's busbw as a fraction of the link
// rate (target ≥ 0.9; ≥ 2× gloo on veth).
func BenchmarkClusterAllreduce(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	script, err := filepath.Abs("testdata/gloo_allreduce.py")
	if err != nil {
		b.Fatal(err)
	}
	sizes := []int{16 << 20, 64 << 20}
	var sizeArgs []string
	for _, s := range sizes {
		sizeArgs = append(sizeArgs, strconv.Itoa(s))
	}
	gloo := hasTorch()
	if !gloo {
		b.Log("no torch for /usr/bin/python3: gloo is not measured")
	}
	bin := buildGotrain(b)
	for _, link := range []string{"veth", "shaped"} {
		b.Run(link, func(b *testing.B) {
			c := clustertest.New(b, clustertest.Options{Hosts: 2})
			if link == "shaped" {
				shapeLink(b, c)
			}
			for i := 0; i < b.N; i++ {
				// As a user runs it: from this machine, over ssh.
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				args := append([]string{"bench", "allreduce", "--hosts", hostList(c, 1), "--sizes", strings.Join(sizeArgs, ",")}, c.SSHFlags()...)
				cmd := exec.CommandContext(ctx, bin, args...)
				cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, testproc.WorkerEnv+"=") })
				out, err := cmd.CombinedOutput()
				cancel()
				if err != nil {
					b.Fatalf("gotrain bench allreduce --hosts: %v\n%s", err, out)
				}
				mine := busbw(b, string(out))
				ceiling := tcpCeiling(b, c, exe, sizeArgs)
				var theirs map[int]float64
				if gloo {
					outs := onHosts(b, c, 5*time.Minute, "",
						func(int) []string { return append([]string{"/usr/bin/python3", script}, sizeArgs...) },
						func(r int) []string { return rankEnv(c, r, 29501) })
					theirs = busbw(b, outs[0])
				}
				for _, s := range sizes {
					mib := s >> 20
					if _, ok := mine[s]; !ok {
						b.Fatalf("gotrain bench printed no result for %d bytes:\n%s", s, out)
					}
					b.ReportMetric(mine[s], fmt.Sprintf("gotrain_busbw_GBps_%dMiB", mib))
					b.ReportMetric(ceiling[s], fmt.Sprintf("tcp_duplex_GBps_%dMiB", mib))
					b.ReportMetric(mine[s]/ceiling[s], fmt.Sprintf("gotrain_over_tcp_%dMiB", mib))
					if link == "shaped" {
						b.ReportMetric(mine[s]*8e9/shapedRate, fmt.Sprintf("link_fraction_%dMiB", mib))
					}
					if gloo && theirs[s] > 0 {
						b.ReportMetric(theirs[s], fmt.Sprintf("gloo_busbw_GBps_%dMiB", mib))
						b.ReportMetric(mine[s]/theirs[s], fmt.Sprintf("gotrain_over_gloo_%dMiB", mib))
					}
				}
			}
		})
	}
}

// BenchmarkClusterMLPCommHook: 2 nodes × 1 worker train the MNIST MLP on
// the shaped link, with float32 gradients and with --comm-hook bf16.
// Metrics: samples/s of each and bf16/float32.
func BenchmarkClusterMLPCommHook(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	c := clustertest.New(b, clustertest.Options{Hosts: 2, NoSSH: true})
	shapeLink(b, c)
	for i := 0; i < b.N; i++ {
		speed := map[string]float64{}
		for _, hook := range []string{"allreduce", "bf16"} {
			outs := onHosts(b, c, 5*time.Minute, "",
				func(r int) []string {
					return []string{exe, "run", "--nnodes", "2", "--node-rank", strconv.Itoa(r), "--nproc-per-node", "1",
						"--master-addr", c.Hosts[0].Addr, "--master-port", "29500",
						exe, "train", "mnist", "--max-steps", "200", "--progress=false", "--comm-hook", hook}
				},
				func(int) []string {
					return []string{testproc.Env("gotrain"), "GOTRAIN_TOKEN=0123456789abcdef0123456789abcdef", "GOTRAIN_SHM=0"}
				})
			line := lastRank0Line(outs[0])
			for _, f := range strings.Fields(strings.TrimPrefix(line, "[rank0]: ")) {
				if v, ok := strings.CutPrefix(f, "samples_per_s="); ok {
					speed[hook], _ = strconv.ParseFloat(v, 64)
				}
			}
			if speed[hook] == 0 {
				b.Fatalf("--comm-hook %s: no samples_per_s in node 0's output:\n%s", hook, outs[0])
			}
		}
		b.ReportMetric(speed["allreduce"], "fp32_samples_per_s")
		b.ReportMetric(speed["bf16"], "bf16_samples_per_s")
		b.ReportMetric(speed["bf16"]/speed["allreduce"], "bf16_over_fp32")
	}
}

// buildGotrain builds gotrain as users get it (static, CGO_ENABLED=0),
// with more go build flags, into a directory of its own, and returns its
// path.
func buildGotrain(b *testing.B, flags ...string) string {
	b.Helper()
	bin := filepath.Join(b.TempDir(), "gotrain")
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), append(append([]string{"build", "-o", bin}, flags...), ".")...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Skipf("cannot build gotrain: %v: %s", err, out)
	}
	return bin
}

// BenchmarkClusterFirstStep: the time from `gotrain train mnist --hosts
// A:1,B:1 --copy` to the first training step (rank 0's checkpoint after
// step 1) on two hosts that have no gotrain: first with empty caches
// (the static gotrain binary is streamed to both), then with the caches
// filled. Target ≤ 2 s.
func BenchmarkClusterFirstStep(b *testing.B) {
	// As built with plain go build, and stripped of its symbol table and
	// debug information (what the README suggests for --copy).
	for _, build := range []struct {
		name  string
		flags []string
	}{{"plain", nil}, {"stripped", []string{"-trimpath", "-ldflags=-s -w"}}} {
		b.Run(build.name, func(b *testing.B) { benchFirstStep(b, buildGotrain(b, build.flags...)) })
	}
}

// benchFirstStep is BenchmarkClusterFirstStep with the gotrain binary bin.
func benchFirstStep(b *testing.B, bin string) {
	if st, err := os.Stat(bin); err == nil {
		b.ReportMetric(float64(st.Size())/1e6, "binary_MB")
	}
	c := clustertest.New(b, clustertest.Options{Hosts: 2, Hide: []string{filepath.Dir(bin)}})
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, testproc.WorkerEnv+"=") })
	firstStep := func() time.Duration {
		save := filepath.Join(b.TempDir(), "model.safetensors")
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		args := append([]string{"train", "mnist", "--hosts", hostList(c, 1)}, c.SSHFlags()...)
		args = append(args, "--copy", "--progress=false", "--max-steps", "2", "--save", save, "--save-every", "1")
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = env
		var out testlog.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		// Timed at the checkpoint's appearance (an inotify event).
		var took time.Duration
		if !waitDir(b, filepath.Dir(save), 2*time.Minute, func() bool {
			if _, err := os.Stat(checkpoint.TrainingPath(save)); err == nil {
				took = time.Since(start)
			}
			return took > 0
		}) {
			b.Fatalf("no first step within 2 minutes:\n%s", out.String())
		}
		if err := cmd.Wait(); err != nil {
			b.Fatalf("gotrain: %v\n%s", err, out.String())
		}
		return took
	}
	for i := 0; i < b.N; i++ {
		for _, h := range c.Hosts {
			if err := os.RemoveAll(filepath.Join(h.Home, ".cache")); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(firstStep().Seconds(), "cold_first_step_s")
		b.ReportMetric(firstStep().Seconds(), "warm_first_step_s")
	}
}
