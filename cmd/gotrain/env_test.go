package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/gotrain/gotrain/internal/testlog"
	"github.com/gotrain/gotrain/internal/testnet"
)

func lookupOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func TestPETEnv(t *testing.T) {
	newFlags := func() (*pflag.FlagSet, *runFlags) {
		var o runFlags
		f := pflag.NewFlagSet("run", pflag.ContinueOnError)
		f.StringVar(&o.nnodes, "nnodes", "1", "")
		f.IntVar(&o.nodeRank, "node-rank", 0, "")
		f.BoolVar(&o.standalone, "standalone", false, "")
		f.StringVar(&o.runID, "run-id", "", "")
		f.StringVar(&o.nprocPerNode, "nproc-per-node", "1", "")
		return f, &o
	}
	f, o := newFlags()
	if err := f.Parse([]string{"--nproc-per-node", "3"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_STANDALONE": "1", "PET_RDZV_ID": "job7", "PET_NPROC_PER_NODE": "5"}
	if err := applyPETEnv(f, lookupOf(env)); err != nil {
		t.Fatal(err)
	}
	if o.nnodes != "2" || o.nodeRank != 1 || !o.standalone || o.runID != "job7" {
		t.Errorf("PET_ variables gave %+v", *o)
	}
	if o.nprocPerNode != "3" {
		t.Errorf("--nproc-per-node 3 on the command line, PET_NPROC_PER_NODE=5: got %s, want the command line's", o.nprocPerNode)
	}
	f, _ = newFlags()
	err := applyPETEnv(f, lookupOf(map[string]string{"PET_NODE_RANK": "one"}))
	if err == nil || !strings.Contains(err.Error(), "PET_NODE_RANK=") || !strings.Contains(err.Error(), "--node-rank") || !isUsage(err) {
		t.Errorf("PET_NODE_RANK=one: %v, want a usage error naming the variable and the flag", err)
	}
}

// Every `gotrain run` flag has its PET_ variable.
func TestPETEnvEveryRunFlag(t *testing.T) {
	n := 0
	newRunCmd().Flags().VisitAll(func(fl *pflag.Flag) {
		if fl.Name == "help" {
			return
		}
		n++
		seen := false
		lookup := func(k string) (string, bool) {
			if k == petName(fl.Name) {
				seen = true
				return fl.DefValue, true
			}
			return "", false
		}
		// A fresh flag set per flag: Set marks the flag changed.
		g := pflag.NewFlagSet(fl.Name, pflag.ContinueOnError)
		cp := *fl
		g.AddFlag(&cp)
		if err := applyPETEnv(g, lookup); err != nil || !seen || !cp.Changed {
			t.Errorf("--%s from %s=%q: err %v, read %v, set %v", fl.Name, petName(fl.Name), fl.DefValue, err, seen, cp.Changed)
		}
	})
	if n < 10 {
		t.Fatalf("only %d run flags", n)
	}
}

func TestEnvCommand(t *testing.T) {
	var out bytes.Buffer
	env := map[string]string{"SLURM_JOB_ID": "77", "SLURM_STEP_ID": "0", "SLURM_PROCID": "3", "SLURM_NTASKS": "4",
		"SLURM_LOCALID": "1", "SLURM_NODEID": "1", "SLURM_NNODES": "2", "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_STEP_NODELIST": "gnode[07-08]"}
	if err := runEnv(context.Background(), &out, lookupOf(env)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"engine: slurm\n", "SLURM_STEP_NODELIST=gnode[07-08]", "rank: 3\n", "world size: 4\n", "local rank: 1\n",
		"local world size: 2\n", "node rank: 1\n", "nodes: 2\n", "master: gnode07:15077 (the first host of SLURM_STEP_NODELIST, port SLURM_JOB_ID)\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("gotrain env printed\n%s\nwant %q in it", out.String(), want)
		}
	}
	delete(env, "SLURM_STEP_NODELIST")
	err := runEnv(context.Background(), &out, lookupOf(env))
	if err == nil || !strings.Contains(err.Error(), "SLURM_STEP_NODELIST") || strings.Contains(err.Error(), "\n") {
		t.Errorf("without a node list: %v, want one line naming the variables", err)
	}
}

// A Kubeflow TrainJob of 2 nodes with 2 processes each, whose command is
// `gotrain run PROGRAM`: the Torch plugin's PET_ variables, replayed (the
// master's DNS name swapped for loopback), are the launcher's flags.
func TestTrainJobUnderRun(t *testing.T) {
	port := strconv.Itoa(testnet.FreePort(t))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var outs [2]testlog.Buffer
	var cmds [2]*exec.Cmd
	for node := range cmds {
		cmd := gotrainCmd(ctx, t, "run", "sh", "-c", "echo place rank=$RANK world=$WORLD_SIZE local=$LOCAL_RANK node=$GROUP_RANK master=$MASTER_ADDR:$MASTER_PORT")
		cmd.Env = append(cmd.Env, "PET_NNODES=2", "PET_NPROC_PER_NODE=2", "PET_NODE_RANK="+strconv.Itoa(node),
			"PET_MASTER_ADDR=127.0.0.1", "PET_MASTER_PORT="+port, "GOTRAIN_ALLOW_LOOPBACK=1",
			"GOTRAIN_TOKEN=kube-test-token") // the manifest's secret
		cmd.Stdout, cmd.Stderr = &outs[node], &outs[node]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[node] = cmd
	}
	var places []string
	for node, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("node %d: %v\n%s", node, err, outs[node].String())
		}
		for _, l := range strings.Split(outs[node].String(), "\n") {
			if _, p, ok := strings.Cut(l, "place "); ok {
				places = append(places, p)
			}
		}
	}
	slices.Sort(places)
	var want []string
	for r := range 4 {
		want = append(want, fmt.Sprintf("rank=%d world=4 local=%d node=%d master=127.0.0.1:%s", r, r%2, r/2, port))
	}
	if !slices.Equal(places, want) {
		t.Errorf("workers got\n%s\nwant\n%s", strings.Join(places, "\n"), strings.Join(want, "\n"))
	}
}
