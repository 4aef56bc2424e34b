// Package testenv lets a test say that it needs an engine: a program such
// as etcd, mpirun or chromium, or a facility such as root for network
// namespaces. Where the engine is missing the test is skipped with a
// message naming it and how to install it; with GOTRAIN_REQUIRE_ENGINES=1
// (CI, where .ci/run installs every engine) it fails instead, so that a
// lost engine cannot quietly turn a test into a skip.
package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// RequireVar is the environment variable that, set to 1, turns a missing
// engine into a test failure.
const RequireVar = "GOTRAIN_REQUIRE_ENGINES"

// Required reports whether a missing engine fails the test rather than
// skipping it.
func Required() bool { return os.Getenv(RequireVar) == "1" }

// Need skips t, or fails it when Required, saying that it needs engine
// and why engine is not usable here, such as
// Need(t, "network namespaces", "not root").
func Need(t testing.TB, engine, why string) {
	t.Helper()
	if Required() {
		t.Fatalf("needs %s: %s (%s=1: a missing engine fails the test)", engine, why, RequireVar)
	}
	t.Skipf("needs %s: %s; skipping (%s=1 makes this a failure)", engine, why, RequireVar)
}

// packages names the Debian package that installs each program the tests
// look for, for the messages.
var packages = map[string]string{
	"chromium": "chromium", "tmux": "tmux", "etcd": "etcd-server",
	"ip": "iproute2", "tc": "iproute2", "nft": "nftables",
	"unshare": "util-linux", "nsenter": "util-linux",
	"ssh": "openssh-client", "ssh-keygen": "openssh-client", "sshd": "openssh-server",
	"mpirun.openmpi": "openmpi-bin", "mpiexec.hydra": "mpich",
	"srun": "slurm-client", "sbatch": "slurm-client", "sinfo": "slurm-client", "slurmctld": "slurmctld",
	"slurmd": "slurmd", "munged": "munge",
}

// Missing returns "" if program is in PATH, else why not and how to
// install it.
func Missing(program string) string {
	if _, err := exec.LookPath(program); err == nil {
		return ""
	}
	if pkg, ok := packages[program]; ok {
		return program + " is not installed (apt-get install " + pkg + "; .ci/run and .ci/engines.sh install every engine)"
	}
	return program + " is not in PATH"
}

// LookPath returns the path of the first of names found in PATH: an
// engine is the one thing a test takes from the machine. Without any of
// them it calls Need for names[0], saying how to install it.
func LookPath(t testing.TB, names ...string) string {
	t.Helper()
	for _, name := range names {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	Need(t, names[0], Missing(names[0]))
	return ""
}
