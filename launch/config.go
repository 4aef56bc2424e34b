package launch

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/gotrain/gotrain/launch/rendezvous"
)

// Defaults of the zero Config, as torchrun has them.
const (
	DefaultMasterAddr      = "127.0.0.1"
	DefaultMasterPort      = 29500
	DefaultMonitorInterval = 100 * time.Millisecond
	DefaultStopTimeout     = 3 * time.Second
)

// Sentinel errors of the launcher. Errors that Run and Config checks return
// wrap one of these, so callers can test for them with errors.Is.
var (
	// ErrConfig is wrapped by every error about an invalid Config or flag.
	ErrConfig = errors.New("launch: invalid configuration")
	// ErrProgramNotFound means the program to launch does not exist or is
	// not executable.
	ErrProgramNotFound = errors.New("launch: program not found")
	// ErrInterrupted means ctx ended before the job did; the workers were
	// stopped.
	ErrInterrupted = errors.New("launch: interrupted")
)

// Config describes one node's share of a job: which program to run, how many
// workers, and where this node sits among the nodes. Its zero value runs one
// worker on one node; only Program is required.
type Config struct {
	// Program is the worker executable, looked up in the launcher's PATH
	// unless it contains a slash. Any program will do, not only Go ones.
	Program string
	// Args are the worker's arguments, without the program name.
	Args []string

	// NProcPerNode is the number of workers on this node (0 means 1).
	NProcPerNode int
	// NNodes is the number of nodes in the job (0 means 1). Every node
	// runs its own launcher with the same NNodes, NProcPerNode, MasterAddr,
	// MasterPort and GOTRAIN_TOKEN, and its own NodeRank (or its own
	// NProcPerNode too, with RankOffset and WorldSize).
	NNodes int
	// NodeRank is this node's rank in [0, NNodes). Worker global ranks are
	// NodeRank·NProcPerNode + local rank (torchrun's static rendezvous),
	// unless RankOffset says otherwise.
	NodeRank int
	// RankOffset and WorldSize place this node in a job whose nodes run
	// different numbers of workers (hosts with their own slots, as in
	// DeepSpeed and Open MPI): RankOffset is the global rank of this
	// node's local rank 0, the workers of nodes 0..NodeRank-1 together,
	// and WorldSize the workers of every node. 0 means the computation of
	// nodes that all run NProcPerNode: NodeRank·NProcPerNode and
	// NNodes·NProcPerNode. (Node 0's offset is 0 either way, and a later
	// node's is at least NodeRank, so 0 is never a real offset there.)
	RankOffset, WorldSize int
	// MasterAddr is the address of node 0, where rank 0 serves the
	// rendezvous store ("" means 127.0.0.1 on a single node; several need
	// it set, and not to loopback: see CheckMasterAddr).
	MasterAddr string
	// MasterPort is the store's port: 0 means 29500, or with Standalone a
	// free local port chosen by the launcher.
	MasterPort int
	// Standalone runs a single-node job on a free local port and a random
	// run id, like torchrun --standalone. It requires NNodes ≤ 1.
	Standalone bool
	// Rendezvous, if set, makes the job elastic (torchrun --nnodes
	// MIN:MAX with --rdzv-endpoint): each of its rounds gives the node's
	// place (the fields NNodes, NodeRank, MasterAddr and MasterPort are
	// then ignored), and a change of membership re-forms the group (see
	// elastic.go). The caller owns it and closes it after Run.
	Rendezvous *rendezvous.Rendezvous

	// MaxRestarts is how many times the whole group of workers is restarted
	// after a worker fails (0: the first failure ends the job).
	MaxRestarts int
	// RestartCount is the restart count of the first attempt (0 for a new
	// job): a launcher above Run that restarts several nodes together
	// (gotrain's agent) runs each attempt with its count, which the
	// workers see in GOTRAIN_RESTART_COUNT. Run restarts while the count
	// is below MaxRestarts, unless NoRestart.
	RestartCount int
	// RestartBackoff is the wait before the first restart, which doubles
	// for each next one up to MaxRestartBackoff (see RestartDelay); ctx's
	// end cuts it short. 0 means DefaultRestartBackoff (1 s), a negative
	// value restarts at once.
	RestartBackoff time.Duration
	// MaxRestartBackoff bounds the wait before a restart (0 means
	// DefaultMaxRestartBackoff, 30 s).
	MaxRestartBackoff time.Duration
	// NoRestart makes Run return after one attempt, whatever MaxRestarts
	// says (it then only tells the workers TORCHELASTIC_MAX_RESTARTS): the
	// caller decides about restarts.
	NoRestart bool
	// AgentStore means the caller serves the rendezvous store at
	// MasterAddr:MasterPort for the whole job, so rank 0 connects to it
	// instead of serving it: the workers get GOTRAIN_AGENT_STORE=1 and
	// TORCHELASTIC_USE_AGENT_STORE=True.
	AgentStore bool
	// FT makes the job fault-tolerant (see runFT): a failed worker is
	// restarted alone, up to MaxRestarts times per local rank, as a
	// joining replica that heals from a live peer, while the others go
	// on; the workers get the EnvFT variables. Without AgentStore, Run
	// serves the store itself at MasterAddr:MasterPort, so that it
	// outlives every worker.
	FT bool
	// MinReplicas is the smallest number of live replicas an FT job goes
	// on with (0 means 1); below it, with no restart left, the job stops
	// with the root cause.
	MinReplicas int
	// FTJoin marks this node's first workers as joining replicas too
	// (EnvFTJoin): a node that replaces a lost one in a running FT job.
	FTJoin bool
	// ReplicaHost is the host part of an FT job's replica IDs ("" means
	// the machine's host name, followed by "-n" and the node rank when
	// NNodes > 1).
	ReplicaHost string
	// MonitorInterval is how often the launcher polls, while it stops
	// workers, whether their process groups are empty yet (0 means 100 ms).
	// Worker exits themselves are noticed at once through wait(2), not by
	// polling as torchrun does.
	MonitorInterval time.Duration
	// StopTimeout is how long stopped workers get between the stop signal
	// (SIGTERM, or the signal from a SignalError cause) and SIGKILL
	// (0 means 3 s).
	StopTimeout time.Duration
	// RunID names the job (TORCHELASTIC_RUN_ID, GOTRAIN_RUN_ID): "" means a
	// random id with Standalone and "none" otherwise, as in torchrun.
	RunID string
	// LogDir, if set, receives each worker's raw stdout and stderr in
	// LogDir/<run id>_<random>/attempt_<restart>/<local rank>/{stdout,stderr}.log,
	// besides the console (unless Redirects or Tee choose the streams).
	LogDir string

	// Redirects sends the streams it selects of a worker to its LogDir
	// files only, not to the console (torchrun --redirects); Tee sends them
	// to both (torchrun --tee), and wins where both select a stream. Either
	// needs LogDir; with neither, LogDir receives both streams as well as
	// the console.
	Redirects, Tee Streams
	// LocalRanksFilter, if not empty, lists the local ranks whose output the
	// console shows (torchrun --local-ranks-filter); the others' output
	// still reaches their LogDir files, and their stderr the failure report.
	LocalRanksFilter []int
	// OnFailure receives the root cause when the job fails for good (no
	// restart left): the failed worker's rank, host, exit status and last
	// stderr lines. nil logs it as one Error record on Logger;
	// WriteFailure(w) writes it as a block of lines for a person.
	OnFailure func(Failure)
	// OnWorkerFailure, if set, is called at once when the first worker of
	// an attempt fails, before the others are stopped and whether or not
	// a restart follows, with the stderr lines read so far: a launcher of
	// several nodes compares these to find which node failed first.
	OnWorkerFailure func(Failure)

	// Env is the environment the workers inherit, before the launcher adds
	// its variables; nil means os.Environ(). GOTRAIN_TOKEN, OMP_NUM_THREADS
	// and GOTRAIN_NUM_THREADS already in it are kept.
	Env []string
	// Stdout and Stderr receive the workers' output, each line prefixed with
	// "[rank<N>]: "; nil means os.Stdout and os.Stderr. Each Write call
	// holds whole lines only, and calls are never concurrent.
	Stdout, Stderr io.Writer
	// Logger receives the launcher's own messages; nil means text records
	// written to Stderr, serialized with the workers' lines.
	Logger *slog.Logger
	// Events, if set, receives the progress events of the workers: each
	// worker gets a pipe as file descriptor 3, named by GOTRAIN_EVENTS_FD
	// in its environment, and each line it writes there is passed to
	// Events with the worker's global rank, without its newline (see
	// package progress for the events gotrain's workers send). Calls are
	// never concurrent; line is only valid during the call. With LogDir
	// the lines are also kept in events.jsonl beside the worker's
	// stdout.log. Without Events, workers get no pipe and no
	// GOTRAIN_EVENTS_FD.
	Events func(rank int, line []byte)
}

// withDefaults returns c with its zero fields replaced by their documented
// defaults (except the random ones, which Run fills in).
func (c Config) withDefaults() Config {
	if c.NProcPerNode == 0 {
		c.NProcPerNode = 1
	}
	if c.NNodes == 0 {
		c.NNodes = 1
	}
	if c.MasterAddr == "" && c.NNodes <= 1 {
		// Only one node: loopback is right. Several need node 0's real
		// address, which validate asks for rather than guess.
		c.MasterAddr = DefaultMasterAddr
	}
	if c.MasterPort == 0 && !c.Standalone {
		c.MasterPort = DefaultMasterPort
	}
	if c.MonitorInterval == 0 {
		c.MonitorInterval = DefaultMonitorInterval
	}
	if c.StopTimeout == 0 {
		c.StopTimeout = DefaultStopTimeout
	}
	if c.RestartBackoff == 0 {
		c.RestartBackoff = DefaultRestartBackoff
	}
	if c.MaxRestartBackoff == 0 {
		c.MaxRestartBackoff = DefaultMaxRestartBackoff
	}
	if c.RunID == "" && !c.Standalone {
		c.RunID = "none"
	}
	return c
}

// globalRank is the global rank of this node's local rank local: the one
// place that derives it, for the environment, the output prefixes, the
// events and the failure reports.
func (c Config) globalRank(local int) int {
	if c.RankOffset != 0 {
		return c.RankOffset + local
	}
	return c.NodeRank*c.NProcPerNode + local
}

// worldSize is the number of workers of the whole job.
func (c Config) worldSize() int {
	if c.WorldSize != 0 {
		return c.WorldSize
	}
	return c.NNodes * c.NProcPerNode
}

// validate checks a Config after withDefaults. It does not look the program
// up; Run does.
func (c Config) validate() error {
	switch {
	case c.Program == "":
		return fmt.Errorf("%w: no program to run", ErrConfig)
	case c.NProcPerNode < 0:
		return fmt.Errorf("%w: nproc-per-node must be at least 1, got %d", ErrConfig, c.NProcPerNode)
	case c.NNodes < 0:
		return fmt.Errorf("%w: nnodes must be at least 1, got %d", ErrConfig, c.NNodes)
	case c.NodeRank < 0 || c.NodeRank >= c.NNodes:
		return fmt.Errorf("%w: node-rank %d out of range [0, %d) for nnodes %d", ErrConfig, c.NodeRank, c.NNodes, c.NNodes)
	case c.RankOffset < 0 || c.WorldSize < 0:
		return fmt.Errorf("%w: rank offset %d and world size %d must not be negative", ErrConfig, c.RankOffset, c.WorldSize)
	case c.RankOffset != 0 && c.RankOffset < c.NodeRank:
		return fmt.Errorf("%w: rank offset %d is below node rank %d: every node before this one runs at least one worker", ErrConfig, c.RankOffset, c.NodeRank)
	case c.globalRank(c.NProcPerNode-1) >= c.worldSize():
		return fmt.Errorf("%w: this node's ranks %d..%d do not fit in world size %d", ErrConfig, c.globalRank(0), c.globalRank(c.NProcPerNode-1), c.worldSize())
	case c.Standalone && c.NNodes > 1:
		return fmt.Errorf("%w: standalone runs a single node, but nnodes is %d", ErrConfig, c.NNodes)
	case c.MasterPort < 0 || c.MasterPort > 65535:
		return fmt.Errorf("%w: master-port %d out of range [1, 65535]", ErrConfig, c.MasterPort)
	case c.MaxRestarts < 0:
		return fmt.Errorf("%w: max-restarts must be at least 0, got %d", ErrConfig, c.MaxRestarts)
	case c.RestartCount < 0:
		return fmt.Errorf("%w: restart count must be at least 0, got %d", ErrConfig, c.RestartCount)
	case c.MonitorInterval < 0:
		return fmt.Errorf("%w: monitor-interval must be positive, got %v", ErrConfig, c.MonitorInterval)
	case c.StopTimeout < 0:
		return fmt.Errorf("%w: stop-timeout must be positive, got %v", ErrConfig, c.StopTimeout)
	}
	if err := c.validateFT(); err != nil {
		return err
	}
	env := c.Env
	if env == nil {
		env = os.Environ()
	}
	allow, _ := lookupEnv(env, EnvAllowLoopback)
	if c.Rendezvous != nil {
		return c.checkOutput() // each round's master address is checked as it closes
	}
	if err := CheckMasterAddr(c.MasterAddr, c.NNodes, allow == "1"); err != nil {
		return fmt.Errorf("%w: master-addr %q: %w", ErrConfig, c.MasterAddr, err)
	}
	return c.checkOutput()
}

// EnvAllowLoopback set to 1 lets a multi-node job use a loopback master
// address, for "nodes" that all run on one host (tests, trials).
const EnvAllowLoopback = "GOTRAIN_ALLOW_LOOPBACK"

// addrError is why a master address is refused; it matches ErrConfig.
type addrError string

func (e addrError) Error() string { return string(e) }

// Is makes an addrError match ErrConfig.
func (e addrError) Is(target error) bool { return target == ErrConfig }

// CheckMasterAddr says what is wrong with addr as the master address of a
// job of nnodes nodes, before anything waits on it: a port in it (the
// port goes in MasterPort), anything but a host name or IP address, and in
// a multi-node job an empty address or a loopback one, which the other
// nodes cannot reach (unless allowLoopback: every node on this host). The
// error's text is the reason alone, and it matches ErrConfig.
func CheckMasterAddr(addr string, nnodes int, allowLoopback bool) error {
	if h, p, err := net.SplitHostPort(addr); err == nil {
		return addrError(fmt.Sprintf("holds a port; give the host and the port apart: --master-addr %s --master-port %s", h, p))
	}
	if strings.ContainsAny(addr, " \t\n/") {
		return addrError("must be a host name or IP address")
	}
	if nnodes <= 1 {
		return nil
	}
	if addr == "" {
		return addrError(fmt.Sprintf("must be node 0's address in a multi-node job (nnodes %d)", nnodes))
	}
	if ip := net.ParseIP(addr); (ip != nil && ip.IsLoopback() || strings.EqualFold(addr, "localhost")) && !allowLoopback {
		return addrError(fmt.Sprintf("is a loopback address in a multi-node job (nnodes %d): the other nodes cannot reach it, and rank 0 would advertise it to them; use node 0's network address (%s=1 if every node runs on this host)", nnodes, EnvAllowLoopback))
	}
	return nil
}
