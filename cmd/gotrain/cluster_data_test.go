package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/data/shards"
	"github.com/gotrain/gotrain/testing/clustertest"
)

// nodeLocalDataset writes a prepared dataset of bytes into dir: 6 train
// shards of 3000 tokens and a val shard of 2000, the bytes of a text.
func nodeLocalDataset(t *testing.T, dir string) *shards.Index {
	t.Helper()
	w, err := shards.Create(dir, "bytes", 256, -1, 3000)
	if err != nil {
		t.Fatal(err)
	}
	text := []byte(strings.Repeat("package main\n\nfunc main() {\n\tfor i := range 10 {\n\t\tprintln(i * i)\n\t}\n}\n", 400))
	ids := make([]int, len(text))
	for i, b := range text {
		ids[i] = int(b)
	}
	if err := w.Write(shards.Train, ids[:18000]); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(shards.Val, ids[18000:20000]); err != nil {
		t.Fatal(err)
	}
	idx, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

// gptOnHosts is `gotrain train gpt --hosts …` on c with one worker per
// host, a small model, then more flags.
func gptOnHosts(c *clustertest.Cluster, flags ...string) []string {
	args := append([]string{"train", "gpt", "--hosts", hostList(c, 1)}, c.SSHFlags()...)
	args = append(args, "--progress=false", "--n-layer", "1", "--n-head", "2", "--n-embd", "32", "--block-size", "32",
		"--batch-size", "4", "--eval-every", "4", "--eval-batches", "1")
	return append(args, flags...)
}

// TestClusterNodeLocalData: `gotrain data distribute` puts half of a
// dataset's train shards on each of 2 hosts (in each host's own /root,
// with no shared file system), and `gotrain train gpt --data /root/tokens
// --hosts` trains on them, each rank reading its host's half. With a
// shard removed from host 1, the job fails on every rank with one line
// naming the shard and the hosts checked.
func TestClusterNodeLocalData(t *testing.T) {
	c := newCluster(t, 2, clustertest.Options{})
	src := filepath.Join(t.TempDir(), "tokens")
	idx := nodeLocalDataset(t, src)
	var addrs []string
	for _, h := range c.Hosts {
		addrs = append(addrs, h.Addr)
	}
	args := append([]string{"data", "distribute", src, "--hosts", strings.Join(addrs, ","), "--remote-dir", "/root/tokens"}, c.SSHFlags()...)
	all, _, code := runGotrain(t, 60*time.Second, args...)
	if code != 0 {
		t.Fatalf("data distribute: exit code %d:\n%s", code, all)
	}
	train := idx.Files(shards.Train)
	held := make([][]string, len(c.Hosts))
	for i, h := range c.Hosts {
		ents, err := os.ReadDir(filepath.Join(h.Home, "tokens"))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if slices.Contains(train, e.Name()) {
				held[i] = append(held[i], e.Name())
			}
		}
	}
	if len(held[0]) != 3 || len(held[1]) != 3 || slices.ContainsFunc(held[0], func(f string) bool { return slices.Contains(held[1], f) }) {
		t.Fatalf("train shards on the hosts %v, want a different half on each", held)
	}
	t.Logf("host 0 holds %v, host 1 %v", held[0], held[1])

	all, stdout, code := runGotrain(t, 120*time.Second, gptOnHosts(c, "--data", "/root/tokens", "--max-steps", "4")...)
	if code != 0 {
		t.Fatalf("train gpt on node-local shards: exit code %d:\n%s", code, all)
	}
	if kv := summary(t, stdout); kv["world"] != "2" || kv["steps"] != "4" {
		t.Errorf("summary %v: want world=2 steps=4", kv)
	}
	dealt := ""
	for l := range strings.Lines(all) {
		if strings.Contains(l, "node-local shards dealt to ranks") {
			dealt = strings.TrimSpace(l)
		}
	}
	if !strings.Contains(dealt, "hosts=2") || !strings.Contains(dealt, "skipped_percent=") {
		t.Errorf("no line reports the dealing over 2 hosts and the windows skipped:\n%s", all)
	}
	t.Logf("%s", dealt)

	// Host 1 loses a shard: no host holds it.
	gone := held[1][1]
	if err := os.Remove(filepath.Join(c.Hosts[1].Home, "tokens", gone)); err != nil {
		t.Fatal(err)
	}
	all, _, code = runGotrain(t, 120*time.Second, gptOnHosts(c, "--data", "/root/tokens", "--max-steps", "4")...)
	if code == 0 {
		t.Fatalf("a shard on no host: exit code 0:\n%s", all)
	}
	want := gone + " is on no host: checked " + c.Hosts[0].Name + ", " + c.Hosts[1].Name + " in /root/tokens"
	// Each worker's lines: "[rankN]: …" (the launcher's summary of the
	// root cause quotes them again, unprefixed).
	ranks := map[string]int{}
	for l := range strings.Lines(all) {
		if rank, _, ok := strings.Cut(l, "]: "); ok && strings.HasPrefix(rank, "[rank") && strings.Contains(l, want) {
			ranks[rank]++
		}
	}
	if len(ranks) != 2 {
		t.Errorf("the ranks reporting %q: %v, want both:\n%s", want, ranks, all)
	}
	for r, n := range ranks {
		if n != 1 {
			t.Errorf("%s] reports the missing shard in %d lines, want 1:\n%s", r, n, all)
		}
	}
}

// TestClusterNodeLocalDataEverywhere: with every shard on both hosts
// (--replicas 2) the job trains as on a shared disk: the model equals,
// within the last bits of the reduction order, that of two local
// workers reading the original directory.
func TestClusterNodeLocalDataEverywhere(t *testing.T) {
	c := newCluster(t, 2, clustertest.Options{})
	src := filepath.Join(t.TempDir(), "tokens")
	nodeLocalDataset(t, src)
	args := append([]string{"data", "distribute", src, "--hosts", hostList(c, 1), "--replicas", "2", "--remote-dir", "~/tokens"}, c.SSHFlags()...)
	if all, _, code := runGotrain(t, 60*time.Second, args...); code != 0 {
		t.Fatalf("data distribute --replicas 2: exit code %d:\n%s", code, all)
	}
	dir := t.TempDir()
	job := []string{"--max-steps", "6", "--seed", "3"}
	local := filepath.Join(dir, "local.safetensors")
	all, _, code := runGotrain(t, 120*time.Second, append([]string{"train", "gpt", "--progress=false", "--nproc-per-node", "2",
		"--n-layer", "1", "--n-head", "2", "--n-embd", "32", "--block-size", "32", "--batch-size", "4", "--eval-every", "6",
		"--eval-batches", "1", "--data", src, "--save", local}, job...)...)
	if code != 0 {
		t.Fatalf("2 local workers: exit code %d:\n%s", code, all)
	}
	remote := filepath.Join(dir, "cluster.safetensors")
	all, _, code = runGotrain(t, 120*time.Second, append(gptOnHosts(c, "--data", "/root/tokens", "--save", remote), job...)...)
	if code != 0 {
		t.Fatalf("2 hosts: exit code %d:\n%s", code, all)
	}
	if !strings.Contains(all, "every rank holds every shard") {
		t.Errorf("the ranks did not find every shard on every host:\n%s", all)
	}
	want, got := params(t, local), params(t, remote)
	if len(got) != len(want) {
		t.Fatalf("%d tensors on the cluster, %d locally", len(got), len(want))
	}
	worst := 0.0
	for name, w := range want {
		g := got[name]
		if len(g) != len(w) {
			t.Fatalf("%s: %d values on the cluster, %d locally", name, len(g), len(w))
		}
		scale, diff := 0.0, 0.0
		for i := range w {
			scale = max(scale, float64(abs32(w[i])))
			diff = max(diff, float64(abs32(g[i]-w[i])))
		}
		if diff > 1e-6*scale {
			t.Errorf("%s: differs from 2 local workers by %.2g relative to its largest value", name, diff/scale)
		}
		worst = max(worst, diff/scale)
	}
	t.Logf("largest difference from 2 local workers: %.2g relative", worst)
}

func abs32(x float32) float32 {
	if x < 0 {
		return -x
	}
	return x
}
