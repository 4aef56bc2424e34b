package distributed

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gotrain/gotrain/distributed/clusterenv"
	"github.com/gotrain/gotrain/distributed/tlsconf"
	"github.com/gotrain/gotrain/internal/logging"
)

// Defaults of Config's zero fields.
const (
	// DefaultTimeout bounds each operation. PyTorch waits thirty minutes;
	// five are plenty for any single collective and fail a stuck job
	// sooner.
	DefaultTimeout = 5 * time.Minute
	// DefaultConnectTimeout bounds Init's rendezvous: reaching the store
	// and connecting the mesh.
	DefaultConnectTimeout = 60 * time.Second
	// DefaultPortMin and DefaultPortMax are the data plane's listen ports
	// when neither Config nor GOTRAIN_PORT_RANGE names any: with the
	// store's port (MASTER_PORT, 29500 by default) the ports a firewall
	// between nodes must open. Only when all of them are taken does a rank
	// listen on any free port, and it logs a warning.
	DefaultPortMin, DefaultPortMax = 29600, 29700
	// DefaultHeartbeatTimeout is how long a peer may stay silent, not even
	// sending heartbeats, before every rank reports it.
	DefaultHeartbeatTimeout = 15 * time.Second
)

// Config configures Init. The zero value works under torchrun,
// `gotrain run`, Slurm's srun, Open MPI's mpirun, MPICH's mpiexec or a
// Kubeflow PyTorchJob or TrainJob: it reads the environment they set
// (`gotrain env` shows what it finds).
type Config struct {
	// InitMethod is "env://" (the default), "tcp://host:port" or
	// "file:///path". With env:// and tcp://, the store is a TCP store at
	// MASTER_ADDR:MASTER_PORT (resp. host:port) that rank 0 serves unless
	// AgentStore is set; with file:// it is a file store at path on a file
	// system every rank shares.
	InitMethod string
	// Rank and WorldSize of this process. If WorldSize is 0 both come from
	// the RANK and WORLD_SIZE environment variables, or with env:// from
	// the variables of the engine that started the process (Slurm, MPI,
	// Kubeflow), which then also give the master address and port. With
	// env:// and none of the launcher's variables (RANK, WORLD_SIZE,
	// LOCAL_RANK, MASTER_ADDR, MASTER_PORT) set, the process was started
	// by hand: it forms a world of one, rank 0 of 1, on an in-memory
	// store, and logs so.
	Rank, WorldSize int
	// Timeout bounds every operation from the moment it starts running; 0
	// means $GOTRAIN_TIMEOUT (a Go duration) or DefaultTimeout. A context
	// deadline that comes first wins.
	Timeout time.Duration
	// HeartbeatTimeout is the liveness bound: a peer from which nothing,
	// not even a heartbeat, arrives for this long (frozen, stopped, or
	// unreachable) fails the group on every rank, naming it. 0 means
	// $GOTRAIN_HEARTBEAT_TIMEOUT or DefaultHeartbeatTimeout.
	HeartbeatTimeout time.Duration
	// ConnectTimeout bounds Init and NewGroup (store and mesh); 0 means
	// $GOTRAIN_CONNECT_TIMEOUT (a Go duration) or DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// Token is the shared secret every connection proves it knows; ""
	// means $GOTRAIN_TOKEN.
	Token string
	// TLSCA, TLSCert and TLSKey name PEM files: with them every store and
	// data-plane connection runs inside mutual TLS 1.3, each end's
	// certificate verified against the CA (package tlsconf says how), the
	// token handshake inside. All three or none; all empty means
	// $GOTRAIN_TLS_CA, $GOTRAIN_TLS_CERT and $GOTRAIN_TLS_KEY, else plain
	// TCP. "{host}" in TLSCert and TLSKey stands for $GOTRAIN_TLS_HOST, or
	// the host name. Every rank of a job must use TLS or none.
	TLSCA, TLSCert, TLSKey string
	// JobID names the job; connections from other jobs are refused and
	// store keys are namespaced by it. "" means $GOTRAIN_RUN_ID, or
	// "default".
	JobID string
	// ListenHost is the interface the data plane listens on; "" means
	// $GOTRAIN_LISTEN_HOST, or all interfaces. Peers dial this host if it
	// is a specific address, else the address SocketIfname selects or this
	// host uses to reach the store.
	ListenHost string
	// SocketIfname selects the interfaces whose address this rank
	// advertises when ListenHost is not a specific address, in
	// NCCL_SOCKET_IFNAME's syntax: comma-separated name prefixes, "^" in
	// front to exclude them, "=" (after any "^") for exact names, and CIDR
	// entries such as 10.0.0.0/8. "" means $GOTRAIN_SOCKET_IFNAME, else
	// $GLOO_SOCKET_IFNAME, else the source address of the route to the
	// master. A multi-node job never advertises loopback.
	SocketIfname string
	// PortMin and PortMax restrict the data-plane listen port (inclusive),
	// so a firewall can be opened for it; both 0 means
	// $GOTRAIN_PORT_RANGE (MIN-MAX), or DefaultPortMin-DefaultPortMax
	// falling back to any free port when all of those are taken.
	PortMin, PortMax int
	// AllReduceAlgo forces an allreduce algorithm: "ring",
	// "recursive-doubling", "shm" or "hierarchical"; "" means
	// $GOTRAIN_ALLREDUCE_ALGO, or "auto" (chosen by size, world size and
	// how the ranks sit on nodes).
	AllReduceAlgo string
	// AgentStore means a launcher already serves the TCP store at the
	// master address, so rank 0 connects to it instead of serving it
	// (torchrun's TORCHELASTIC_USE_AGENT_STORE); false means
	// $GOTRAIN_AGENT_STORE=1 or TORCHELASTIC_USE_AGENT_STORE=True.
	AgentStore bool
	// AllowMixedBuilds lets ranks that run different programs (different
	// sha256, gotrain version or protocol version: say amd64 and arm64
	// nodes) form a group, logging it; otherwise Init refuses them on
	// every rank, naming both. false means $GOTRAIN_ALLOW_MIXED_BUILDS=1.
	AllowMixedBuilds bool
	// SocketBuffer sets the data connections' SO_SNDBUF/SO_RCVBUF in
	// bytes; 0 means $GOTRAIN_SOCKET_BUFFER, or the kernel's automatic
	// tuning (which measured as fast on loopback).
	SocketBuffer int
	// FlightRecorderDir, if set, is where the group dumps its flight
	// record (see DumpFlightRecorder) when an operation fails and on
	// SIGUSR1; "" means $GOTRAIN_FLIGHT_DIR, or no automatic dumps.
	FlightRecorderDir string
	// Logger receives warnings (refused connections) and the group's
	// set-up records, each with rank=Rank; nil means the program's slog
	// default if it set one, else records in the launcher's format
	// (GOTRAIN_LOG_FORMAT: text or json) on stderr.
	Logger *slog.Logger

	portFallback     bool            // the port range is the default one: any free port if it is full
	socketIfnameFrom string          // where SocketIfname came from, for messages
	cluster          *clusterenv.Env // the engine env:// found (Slurm, MPI, Kubeflow), if any
	alone            bool            // env:// without a launcher: a world of one on an in-memory store
	tls              *tlsconf.Config // loaded from TLSCA, TLSCert, TLSKey; nil: plain TCP
	nodeKey          string          // the node this rank runs on; "" means hostNodeKey(). Only tests set it, to fake nodes on one host.
}

// launcherVars are the variables a launcher sets for env://; with none of
// them a process started by hand is a world of one.
var launcherVars = []string{"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}

// Allreduce algorithm names.
const (
	AlgoAuto              = "auto"
	AlgoRing              = "ring"
	AlgoRecursiveDoubling = "recursive-doubling"
	// AlgoShm reduces through a shared-memory arena when every rank runs
	// on one host (what auto does then too), and falls back to auto
	// otherwise.
	AlgoShm = "shm"
	// AlgoHierarchical reduces inside each node, allreduces among one
	// leader per node and broadcasts inside each node (also for
	// Broadcast, AllGather and ReduceScatter); auto picks it when the
	// group spans several nodes and some node runs several ranks.
	AlgoHierarchical = "hierarchical"
)

// storeEnv is what Init reads from the environment besides Config's
// fields: where the env:// store is, and which restart of the job this is.
type storeEnv struct {
	// masterHost and masterPort are MASTER_ADDR and MASTER_PORT, the
	// env:// store's address.
	masterHost, masterPort string
	// restart is GOTRAIN_RESTART_COUNT, else TORCHELASTIC_RESTART_COUNT:
	// it namespaces the store keys so a restarted job does not meet the
	// keys of its previous attempt.
	restart string
	// localWorldSize is LOCAL_WORLD_SIZE (0 if unset): fewer ranks on
	// this host than in the world make a multi-node job, whose master
	// address must not be loopback.
	localWorldSize int
	// allowLoopback is GOTRAIN_ALLOW_LOOPBACK=1: the "nodes" of a
	// multi-node job share this one host (tests, trials).
	allowLoopback bool
}

// resolve fills defaults from the environment and validates: the one
// place this package reads the environment. Under a PMI launcher it
// exchanges rank 0's address through the launcher, within
// ConnectTimeout.
func (c Config) resolve(ctx context.Context) (Config, storeEnv, error) {
	c, err := c.resolveFields()
	if err != nil {
		return c, storeEnv{}, err
	}
	if c.alone {
		c.Logger.Info("distributed: no launcher environment (none of " + strings.Join(launcherVars, ", ") +
			" is set): a world of one, rank 0 of 1, on an in-memory store")
	}
	env := storeEnv{
		masterHost: os.Getenv("MASTER_ADDR"),
		masterPort: os.Getenv("MASTER_PORT"),
		restart:    os.Getenv("GOTRAIN_RESTART_COUNT"),
	}
	if e := c.cluster; e != nil {
		rctx, cancel := context.WithTimeout(ctx, c.ConnectTimeout)
		err := clusterenv.Rendezvous(rctx, e, os.LookupEnv)
		cancel()
		if err != nil {
			return c, env, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		if c.JobID == "default" && e.JobID != "" {
			c.JobID = e.JobID
		}
		env.masterHost, env.masterPort, env.localWorldSize = e.MasterAddr, e.MasterPort, e.LocalWorldSize
		c.Logger.Debug("distributed: place from the engine", "engine", e.Engine, "world", e.WorldSize,
			"local_world", e.LocalWorldSize, "master", net.JoinHostPort(e.MasterAddr, e.MasterPort), "from", e.MasterFrom)
	}
	if env.restart == "" {
		env.restart = os.Getenv("TORCHELASTIC_RESTART_COUNT")
	}
	if _, ok := os.LookupEnv("LOCAL_WORLD_SIZE"); ok && c.cluster == nil {
		if env.localWorldSize, err = envInt("LOCAL_WORLD_SIZE"); err != nil {
			return c, env, err
		}
	}
	env.allowLoopback = os.Getenv("GOTRAIN_ALLOW_LOOPBACK") == "1"
	return c, env, nil
}

// resolveFields fills Config's zero fields from the environment or their
// defaults and validates them. On error the Config returned is filled as
// far as it got.
func (c Config) resolveFields() (Config, error) {
	if c.InitMethod == "" {
		c.InitMethod = "env://"
	}
	if err := c.resolveWorld(); err != nil {
		return c, err
	}
	if err := c.resolveTimeouts(); err != nil {
		return c, err
	}
	if c.Token == "" {
		c.Token = os.Getenv("GOTRAIN_TOKEN")
	}
	if err := c.resolveTLS(); err != nil {
		return c, err
	}
	if c.JobID == "" {
		c.JobID = os.Getenv("GOTRAIN_RUN_ID")
		if c.JobID == "" {
			c.JobID = "default"
		}
	}
	if c.ListenHost == "" {
		c.ListenHost = os.Getenv("GOTRAIN_LISTEN_HOST")
	}
	if c.socketIfnameFrom == "" {
		c.socketIfnameFrom = "Config.SocketIfname"
		for _, v := range []string{"GOTRAIN_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"} {
			if c.SocketIfname == "" {
				c.SocketIfname, c.socketIfnameFrom = os.Getenv(v), v
			}
		}
	}
	if err := c.resolvePortRange(); err != nil {
		return c, err
	}
	if err := c.resolveAllReduceAlgo(); err != nil {
		return c, err
	}
	if !c.AgentStore {
		c.AgentStore = os.Getenv("GOTRAIN_AGENT_STORE") == "1" || strings.EqualFold(os.Getenv("TORCHELASTIC_USE_AGENT_STORE"), "true")
	}
	if !c.AllowMixedBuilds {
		c.AllowMixedBuilds = os.Getenv("GOTRAIN_ALLOW_MIXED_BUILDS") == "1"
	}
	if c.FlightRecorderDir == "" {
		c.FlightRecorderDir = os.Getenv("GOTRAIN_FLIGHT_DIR")
	}
	if c.SocketBuffer == 0 {
		c.SocketBuffer = envInt0("GOTRAIN_SOCKET_BUFFER", 0)
	}
	if c.Logger == nil {
		c.Logger = logging.Default()
	}
	// Every record names this rank once, whatever the logger.
	c.Logger = logging.WithRank(c.Logger, c.Rank)
	if c.alone && c.ListenHost == "" {
		// No peer will dial this rank: open no port beyond this host.
		c.ListenHost = "127.0.0.1"
	}
	return c, nil
}

// resolveTLS takes the TLS files from the environment when none is set,
// and loads them.
func (c *Config) resolveTLS() error {
	f := tlsconf.Files{CA: c.TLSCA, Cert: c.TLSCert, Key: c.TLSKey}
	if !f.Enabled() {
		f = tlsconf.FromEnv(os.LookupEnv)
	}
	c.TLSCA, c.TLSCert, c.TLSKey = f.CA, f.Cert, f.Key
	if !f.Enabled() || c.tls != nil {
		return nil
	}
	t, err := tlsconf.Load(f.Expand(tlsconf.HostName(os.LookupEnv)))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	c.tls = t
	return nil
}

// resolveWorld takes Rank and WorldSize, when WorldSize is unset, from
// the engine that started this process (Slurm, MPI, Kubeflow; see
// clusterenv.Detect) with env://, else from RANK and WORLD_SIZE, and
// checks that the rank is inside the world.
func (c *Config) resolveWorld() error {
	if c.WorldSize == 0 && c.InitMethod == "env://" {
		e, err := clusterenv.Detect(os.LookupEnv)
		if e.Native() {
			if err != nil {
				return fmt.Errorf("%w: %w", ErrConfig, err)
			}
			c.Rank, c.WorldSize, c.cluster = e.Rank, e.WorldSize, &e
		}
	}
	if c.WorldSize == 0 && c.InitMethod == "env://" && c.cluster == nil && !anySet(launcherVars) {
		c.Rank, c.WorldSize, c.alone = 0, 1, true
	}
	if c.WorldSize == 0 {
		var err error
		if c.Rank, err = envInt("RANK"); err != nil {
			return err
		}
		if c.WorldSize, err = envInt("WORLD_SIZE"); err != nil {
			return err
		}
	}
	if c.WorldSize < 1 {
		return fmt.Errorf("%w: world size %d, want at least 1", ErrConfig, c.WorldSize)
	}
	if c.Rank < 0 || c.Rank >= c.WorldSize {
		return fmt.Errorf("%w: rank %d is outside world size %d (ranks are 0..%d)", ErrConfig, c.Rank, c.WorldSize, c.WorldSize-1)
	}
	return nil
}

// resolveTimeouts defaults Timeout, HeartbeatTimeout and ConnectTimeout
// from GOTRAIN_TIMEOUT, GOTRAIN_HEARTBEAT_TIMEOUT and
// GOTRAIN_CONNECT_TIMEOUT when set, and refuses negative ones.
func (c *Config) resolveTimeouts() error {
	for _, d := range []struct {
		v   *time.Duration
		env string
		def time.Duration
	}{{&c.Timeout, "GOTRAIN_TIMEOUT", DefaultTimeout}, {&c.HeartbeatTimeout, "GOTRAIN_HEARTBEAT_TIMEOUT", DefaultHeartbeatTimeout}} {
		if *d.v != 0 {
			continue
		}
		*d.v = d.def
		if s := os.Getenv(d.env); s != "" {
			v, err := time.ParseDuration(s)
			if err != nil || v <= 0 {
				return fmt.Errorf("%w: %s=%q is not a positive duration", ErrConfig, d.env, s)
			}
			*d.v = v
		}
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
		if s := os.Getenv("GOTRAIN_CONNECT_TIMEOUT"); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil || d <= 0 {
				return fmt.Errorf("%w: GOTRAIN_CONNECT_TIMEOUT=%q is not a positive duration", ErrConfig, s)
			}
			c.ConnectTimeout = d
		}
	}
	if c.Timeout < 0 || c.ConnectTimeout < 0 || c.HeartbeatTimeout < 0 {
		return fmt.Errorf("%w: negative timeout", ErrConfig)
	}
	return nil
}

// defaultPorts is the range resolvePortRange defaults to: DefaultPortMin
// to DefaultPortMax, or, in a test of a full default range, a range of
// the test's own.
var defaultPorts = [2]int{DefaultPortMin, DefaultPortMax}

// resolvePortRange takes the data-plane port range from
// GOTRAIN_PORT_RANGE (MIN-MAX), else the default range, when unset, and
// validates it: 1 <= PortMin <= PortMax <= 65535.
func (c *Config) resolvePortRange() error {
	if c.PortMin == 0 && c.PortMax == 0 {
		if s := os.Getenv("GOTRAIN_PORT_RANGE"); s != "" {
			lo, hi, ok := strings.Cut(s, "-")
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if !ok || err1 != nil || err2 != nil {
				return fmt.Errorf("%w: GOTRAIN_PORT_RANGE=%q, want MIN-MAX", ErrConfig, s)
			}
			c.PortMin, c.PortMax = a, b
		} else {
			c.PortMin, c.PortMax, c.portFallback = defaultPorts[0], defaultPorts[1], true
		}
	}
	if c.PortMin < 0 || c.PortMax < c.PortMin || c.PortMax > 65535 || (c.PortMin == 0) != (c.PortMax == 0) {
		return fmt.Errorf("%w: data-plane port range %d-%d", ErrConfig, c.PortMin, c.PortMax)
	}
	return nil
}

// resolveAllReduceAlgo takes the algorithm from GOTRAIN_ALLREDUCE_ALGO
// when unset, else AlgoAuto, and refuses an unknown one.
func (c *Config) resolveAllReduceAlgo() error {
	if c.AllReduceAlgo == "" {
		c.AllReduceAlgo = os.Getenv("GOTRAIN_ALLREDUCE_ALGO")
		if c.AllReduceAlgo == "" {
			c.AllReduceAlgo = AlgoAuto
		}
	}
	switch c.AllReduceAlgo {
	case AlgoAuto, AlgoRing, AlgoRecursiveDoubling, AlgoShm, AlgoHierarchical:
		return nil
	}
	return fmt.Errorf("%w: allreduce algorithm %q (want %q, %q, %q, %q or %q)", ErrConfig, c.AllReduceAlgo, AlgoAuto, AlgoRing, AlgoRecursiveDoubling, AlgoShm, AlgoHierarchical)
}

func envInt(name string) (int, error) {
	s, ok := os.LookupEnv(name)
	if !ok {
		return 0, fmt.Errorf("%w: %s is not set (set it, or Config.Rank and Config.WorldSize)", ErrConfig, name)
	}
	v, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("%w: %s=%q is not an integer", ErrConfig, name, s)
	}
	return v, nil
}

// anySet reports whether any of the environment variables names is set.
func anySet(names []string) bool {
	for _, n := range names {
		if _, ok := os.LookupEnv(n); ok {
			return true
		}
	}
	return false
}

func envInt0(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
