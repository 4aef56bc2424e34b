package launch

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/gotrain/gotrain/distributed/clusterenv"
)

// Environment variable names of the contract between the launcher and its
// workers. The torchrun names let PyTorch-style programs (and gotrain's
// env:// init) find their place in the job unchanged.
const (
	EnvRank            = "RANK"
	EnvLocalRank       = "LOCAL_RANK"
	EnvWorldSize       = "WORLD_SIZE"
	EnvLocalWorldSize  = "LOCAL_WORLD_SIZE"
	EnvGroupRank       = "GROUP_RANK"
	EnvGroupWorldSize  = "GROUP_WORLD_SIZE"
	EnvRoleName        = "ROLE_NAME"
	EnvRoleRank        = "ROLE_RANK"
	EnvRoleWorldSize   = "ROLE_WORLD_SIZE"
	EnvMasterAddr      = "MASTER_ADDR"
	EnvMasterPort      = "MASTER_PORT"
	EnvRestartCount    = "GOTRAIN_RESTART_COUNT"
	EnvRunID           = "GOTRAIN_RUN_ID"
	EnvToken           = "GOTRAIN_TOKEN"
	EnvNumThreads      = "GOTRAIN_NUM_THREADS"
	EnvOMPNumThreads   = "OMP_NUM_THREADS"
	EnvTorchRestart    = "TORCHELASTIC_RESTART_COUNT"
	EnvTorchMaxRestart = "TORCHELASTIC_MAX_RESTARTS"
	EnvTorchRunID      = "TORCHELASTIC_RUN_ID"
	// EnvTorchAgentStore is "False" unless Config.AgentStore: the launcher
	// serves no store, so rank 0 must (a PyTorch worker reads this to
	// decide).
	EnvTorchAgentStore = "TORCHELASTIC_USE_AGENT_STORE"
	// EnvAgentStore is "1" with Config.AgentStore, for gotrain's workers.
	EnvAgentStore = "GOTRAIN_AGENT_STORE"
)

// jobEnv holds what is the same for every worker of one node's job.
type jobEnv struct {
	cfg        Config
	base       []string // inherited environment, without the keys we set
	token      string
	numThreads string // "" keeps the inherited value
	ompThreads string // "" keeps the inherited value
}

// newJobEnv prepares the environment shared by cfg's workers. It fails if a
// multi-node job has no shared GOTRAIN_TOKEN.
func newJobEnv(cfg Config, inherited []string) (*jobEnv, error) {
	je := &jobEnv{cfg: cfg}
	token, hasToken := lookupEnv(inherited, EnvToken)
	switch {
	case hasToken && token == "":
		return nil, fmt.Errorf("%w: %s is set but empty", ErrConfig, EnvToken)
	case hasToken:
		je.token = token
	case cfg.NNodes > 1:
		// Each node's launcher would draw a different token and no worker
		// could authenticate to another node.
		return nil, fmt.Errorf("%w: a job on %d nodes needs the same %s on every node; set it, e.g. %s=$(openssl rand -hex 32), and pass it to every node's launcher",
			ErrConfig, cfg.NNodes, EnvToken, EnvToken)
	default:
		je.token = randomHex(32)
	}
	// The CPUs this container may use (its cgroup quota), as
	// --nproc-per-node auto counts them: the host's count would give each
	// worker of a quota-limited container many threads per CPU.
	threads := strconv.Itoa(max(1, clusterenv.CPUs()/cfg.NProcPerNode))
	if _, ok := lookupEnv(inherited, EnvNumThreads); !ok {
		je.numThreads = threads
	}
	if _, ok := lookupEnv(inherited, EnvOMPNumThreads); !ok {
		je.ompThreads = threads
	}
	set := map[string]bool{}
	for _, kv := range je.workerEnv(0, 0) {
		k, _, _ := strings.Cut(kv, "=")
		set[k] = true
	}
	for _, kv := range inherited {
		k, _, _ := strings.Cut(kv, "=")
		if !set[k] {
			je.base = append(je.base, kv)
		}
	}
	return je, nil
}

// workerEnv returns the variables the launcher sets for one worker.
func (je *jobEnv) workerEnv(localRank, restart int) []string {
	c := je.cfg
	world := c.worldSize()
	rank := c.globalRank(localRank)
	itoa := strconv.Itoa
	env := []string{
		EnvRank + "=" + itoa(rank),
		EnvLocalRank + "=" + itoa(localRank),
		EnvWorldSize + "=" + itoa(world),
		EnvLocalWorldSize + "=" + itoa(c.NProcPerNode),
		EnvGroupRank + "=" + itoa(c.NodeRank),
		EnvGroupWorldSize + "=" + itoa(c.NNodes),
		EnvRoleName + "=default",
		EnvRoleRank + "=" + itoa(rank),
		EnvRoleWorldSize + "=" + itoa(world),
		EnvMasterAddr + "=" + c.MasterAddr,
		EnvMasterPort + "=" + itoa(c.MasterPort),
		EnvRestartCount + "=" + itoa(restart),
		EnvTorchRestart + "=" + itoa(restart),
		EnvTorchMaxRestart + "=" + itoa(c.MaxRestarts),
		EnvRunID + "=" + c.RunID,
		EnvTorchRunID + "=" + c.RunID,
		EnvToken + "=" + je.token,
	}
	if c.AgentStore {
		env = append(env, EnvTorchAgentStore+"=True", EnvAgentStore+"=1")
	} else {
		env = append(env, EnvTorchAgentStore+"=False")
	}
	if je.numThreads != "" {
		env = append(env, EnvNumThreads+"="+je.numThreads)
	}
	if je.ompThreads != "" {
		env = append(env, EnvOMPNumThreads+"="+je.ompThreads)
	}
	return env
}

// environ is the complete environment of one worker.
func (je *jobEnv) environ(localRank, restart int) []string {
	env := make([]string, 0, len(je.base)+20)
	env = append(env, je.base...)
	return append(env, je.workerEnv(localRank, restart)...)
}

// lookupEnv is os.LookupEnv over an environment list; the last entry wins,
// as in exec.Cmd.
func lookupEnv(env []string, key string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails; it crashes the program instead.
	return hex.EncodeToString(b)
}

// randomRunID returns a random UUID (version 4), the form of torchrun's
// standalone run ids.
func randomRunID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
