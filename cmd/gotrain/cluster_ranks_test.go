package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/data"
	"github.com/gotrain/gotrain/datasets/mnist"
	"github.com/gotrain/gotrain/ddp"
	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/internal/testproc"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/nn/models"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/testing/clustertest"
)

// paramsWorker names the worker that trains the MNIST MLP under DDP for
// a few steps and prints the sha256 of its parameters, so that a test
// can compare every rank's model, not only the one rank 0 saves.
const paramsWorker = "ddpparams"

// The test binary runs the worker when GOTRAIN_TEST_WORKER names it;
// init runs before TestMain, which knows only the gotrain worker.
func init() {
	if os.Getenv(testproc.WorkerEnv) == paramsWorker {
		os.Exit(testproc.ExitCode(trainAndHash(context.Background())))
	}
}

// trainAndHash joins the group (env://), trains 5 steps and prints
// "params sha256=HEX" of the parameters' float32 bits.
func trainAndHash(ctx context.Context) error {
	g, err := distributed.Init(ctx, distributed.Config{})
	if err != nil {
		return err
	}
	defer g.Destroy()
	nn.SetSeed(3)
	model := models.MLP()
	dm, err := ddp.New(ctx, model, g)
	if err != nil {
		return err
	}
	defer dm.Close()
	train, err := mnist.Embedded(mnist.Train, mnist.Normalize(0.1307, 0.3081))
	if err != nil {
		return err
	}
	loader := data.NewLoader(train, 32, data.NewDistributedSampler(train.Len(), g.Size(), g.Rank(), data.Seed(3)))
	opt := optim.NewSGD(dm.Parameters(), 0.05, optim.Momentum(0.9))
	steps := 0
	for batch := range loader.Batches() {
		opt.ZeroGrad()
		if err := nn.CrossEntropy(dm.Forward(batch.X), batch.Y).Backward(); err != nil {
			return err
		}
		opt.Step()
		if steps++; steps == 5 {
			break
		}
	}
	h := sha256.New()
	for _, p := range dm.Parameters() {
		for _, v := range p.Data() {
			binary.Write(h, binary.LittleEndian, math.Float32bits(v))
		}
	}
	fmt.Printf("params sha256=%x\n", h.Sum(nil))
	return g.Barrier(ctx)
}

// TestClusterRanksIdentical: 2 hosts × 2 workers of a DDP program end
// with bitwise the same parameters on every rank.
func TestClusterRanksIdentical(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, 2, clustertest.Options{})
	script := fmt.Sprintf("#!/bin/sh\n%s=%s exec %s \"$@\"\n", testproc.WorkerEnv, paramsWorker, exe)
	src := filepath.Join(t.TempDir(), "ddpparams")
	if err := os.WriteFile(src, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, h := range c.Hosts {
		h.Install(t, src, "ddpparams")
	}
	args := append([]string{"run", "--hosts", hostList(c, 2)}, c.SSHFlags()...)
	all, _, code := runGotrain(t, 60*time.Second, append(args, "/usr/local/bin/ddpparams")...)
	if code != 0 {
		t.Fatalf("exit code %d:\n%s", code, all)
	}
	hashes := map[string]string{}
	for l := range strings.Lines(all) {
		if rank, hash, ok := strings.Cut(strings.TrimSpace(l), ": params sha256="); ok {
			hashes[rank] = hash
		}
	}
	if len(hashes) != 4 {
		t.Fatalf("%d ranks printed their parameters' hash, want 4:\n%s", len(hashes), all)
	}
	for rank, h := range hashes {
		if h != hashes["[rank0]"] {
			t.Errorf("%s's parameters differ from rank 0's: %s, %s", rank, h, hashes["[rank0]"])
		}
	}
	t.Logf("4 ranks, parameters' sha256 %s", hashes["[rank0]"])
}
