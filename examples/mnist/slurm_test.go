package main

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testenv"
	"github.com/gotrain/gotrain/internal/testproc"
)

// slurmCluster is a one-node Slurm cluster this test started: munged,
// slurmctld and slurmd in a temporary directory, on free ports, with their
// own configuration (SLURM_CONF), so nothing of the machine's is used or
// left behind.
type slurmCluster struct {
	dir   string
	conf  string
	procs []*exec.Cmd
}

// startSlurm starts the cluster with 2 CPUs and stops it when the test
// ends; it skips the test when Slurm cannot be started.
func startSlurm(t *testing.T) *slurmCluster {
	t.Helper()
	bins := needEngine(t, "munged", "slurmctld", "slurmd", "srun", "sbatch", "sinfo")
	dir := t.TempDir()
	c := &slurmCluster{dir: dir, conf: filepath.Join(dir, "slurm.conf")}
	t.Cleanup(c.stop)
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	host, _, _ = strings.Cut(host, ".")
	key := make([]byte, 1024)
	rand.Read(key)
	for _, d := range []string{"spool", "state", "log"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "munge.key"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf(`ClusterName=gotraintest
SlurmctldHost=%[1]s(127.0.0.1)
SlurmctldPort=%[2]s
SlurmdPort=%[3]s
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=%[4]s/munge.sock
SlurmUser=root
SlurmdUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
SchedulerType=sched/builtin
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SlurmctldPidFile=%[4]s/slurmctld.pid
SlurmdPidFile=%[4]s/slurmd.pid
SlurmdSpoolDir=%[4]s/spool
StateSaveLocation=%[4]s/state
SlurmctldLogFile=%[4]s/log/slurmctld.log
SlurmdLogFile=%[4]s/log/slurmd.log
NodeName=%[1]s NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=test Nodes=%[1]s Default=YES MaxTime=INFINITE State=UP
`, host, freePort(t), freePort(t), dir)
	if err := os.WriteFile(c.conf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	c.start(t, bins[0], "-F", "--force", "--socket="+dir+"/munge.sock", "--key-file="+dir+"/munge.key",
		"--pid-file="+dir+"/munged.pid", "--log-file="+dir+"/log/munged.log", "--seed-file="+dir+"/munge.seed")
	c.start(t, bins[1], "-D", "-i", "-f", c.conf)
	c.start(t, bins[2], "-D", "-f", c.conf, "-N", host)
	var state string
	idle := func() bool {
		sinfo := exec.Command(bins[5], "-h", "-o", "%T")
		sinfo.Env = append(os.Environ(), "SLURM_CONF="+c.conf)
		out, _ := sinfo.CombinedOutput()
		state = strings.TrimSpace(string(out))
		return state == "idle"
	}
	if !testproc.Poll(60*time.Second, idle) {
		logs, _ := exec.Command("sh", "-c", "tail -n 5 "+dir+"/log/*").CombinedOutput()
		testenv.Need(t, "Slurm", fmt.Sprintf("did not start within 60s (sinfo: %q); logs:\n%s", state, logs))
	}
	return c
}

// env is the environment for the cluster's commands: this test's workers
// see no MASTER_ADDR.
func (c *slurmCluster) env(extra ...string) []string {
	return workerEnv(append([]string{"SLURM_CONF=" + c.conf}, extra...)...)
}

func (c *slurmCluster) start(t *testing.T, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "SLURM_CONF="+c.conf)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		testenv.Need(t, "Slurm", fmt.Sprintf("start %s: %v", name, err))
	}
	c.procs = append(c.procs, cmd)
}

// stop ends the daemons, last started first, by PID.
func (c *slurmCluster) stop() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		p.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			p.Process.Kill()
			<-done
		}
	}
}

// summaryLine is the example's summary among other lines.
func summaryLine(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "model=") {
			return l
		}
	}
	return ""
}

// Slurm: srun -n 2 of the example, and an sbatch of examples/slurm's
// script, train with no MASTER_ADDR set.
func TestSlurm(t *testing.T) {
	c := startSlurm(t)
	t.Run("srun", func(t *testing.T) {
		out := runEngine(t, 90*time.Second, c.env(), "srun", "-n", "2", testBinary(t), "--epochs", "1", "--max-steps", "30")
		checkSummary(t, out, "2")
	})
	t.Run("sbatch", func(t *testing.T) {
		script, err := os.ReadFile("../slurm/train-mnist.sbatch")
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "train-mnist.sbatch"), script, 0o755); err != nil {
			t.Fatal(err)
		}
		// The script runs ./mnist-example: here, this test binary.
		if err := os.Symlink(testBinary(t), filepath.Join(dir, "mnist-example")); err != nil {
			t.Fatal(err)
		}
		outFile := filepath.Join(dir, "job.out")
		runEngine(t, 120*time.Second, c.env(), "sbatch", "--wait", "--chdir="+dir, "--output="+outFile,
			filepath.Join(dir, "train-mnist.sbatch"), "--epochs", "1", "--max-steps", "30")
		out, err := os.ReadFile(outFile)
		if err != nil {
			t.Fatal(err)
		}
		line := summaryLine(string(out))
		if line == "" {
			t.Fatalf("no summary in the job's output:\n%s", out)
		}
		checkSummary(t, line, "2")
	})
}
