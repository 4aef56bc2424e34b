// Package clusterenv finds a worker's place in its job from the variables
// the engine that started it set: gotrain run or torchrun, Slurm's srun,
// Open MPI's mpirun, MPICH's (or Intel MPI's) Hydra mpiexec, or a
// Kubeflow PyTorchJob (v1) or TrainJob (v2). It is the environment
// contract behind distributed's env:// init method, kept in one place so
// that it can say what it detected and from which variables.
//
// It never guesses a master address in a multi-node job: variables that
// are incomplete or that contradict each other are an error naming them,
// where a silent fallback to localhost would make every node a world of
// one.
package clusterenv

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// Engine names what started the worker.
type Engine string

// The engines Detect recognises, in the order it tries them.
const (
	// Torchrun is gotrain run, torchrun or any launcher that sets
	// torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, ...).
	Torchrun Engine = "torchrun"
	// Slurm is a task of a Slurm job step (srun).
	Slurm Engine = "slurm"
	// OpenMPI is a process started by Open MPI's mpirun.
	OpenMPI Engine = "openmpi"
	// MPICH is a process started by a PMI launcher: MPICH's or Intel
	// MPI's Hydra mpiexec.
	MPICH Engine = "mpich"
	// TrainJob is a node of a Kubeflow TrainJob (trainer v2).
	TrainJob Engine = "kubeflow-trainjob"
	// PyTorchJob is a pod of a Kubeflow PyTorchJob (training operator v1).
	PyTorchJob Engine = "kubeflow-pytorchjob"
	// Static is RANK and WORLD_SIZE set by hand or by a script.
	Static Engine = "env"
	// None is no engine at all: a single process.
	None Engine = "none"
)

// ErrEnv is what every error of Detect matches: the environment is
// incomplete or contradicts itself.
var ErrEnv = errors.New("clusterenv")

// DefaultMasterPort is torchrun's store port, used where an engine names
// neither a port nor a job id to derive one from.
const DefaultMasterPort = 29500

// Derived ports are JobPortBase + job id mod JobPortSpan: below the
// ephemeral range, so no outgoing connection holds one, and different for
// the concurrent jobs of a cluster (as PyTorch Lightning derives them).
const (
	JobPortBase = 15000
	JobPortSpan = 10000
)

// Var is one environment variable that Detect read.
type Var struct{ Name, Value string }

// Env is a worker's place in its job.
type Env struct {
	// Engine is what started the worker.
	Engine Engine
	// Rank and WorldSize place the worker among all workers.
	Rank, WorldSize int
	// LocalRank and LocalWorldSize place it among the workers of its
	// node; LocalWorldSize < WorldSize makes a multi-node job.
	LocalRank, LocalWorldSize int
	// NodeRank and NNodes place its node; NodeRank is -1 where the engine
	// does not say (MPI launchers).
	NodeRank, NNodes int
	// MasterAddr and MasterPort are where rank 0 serves the rendezvous
	// store. MasterAddr is "" while PMI is true.
	MasterAddr, MasterPort string
	// MasterFrom says where MasterAddr and MasterPort came from.
	MasterFrom string
	// PMI means rank 0's address is to be exchanged through the
	// launcher's PMI key-value space (Rendezvous does it).
	PMI bool
	// JobID identifies the job where the engine names it (Slurm's job and
	// step, the MPI job): store keys are namespaced by it.
	JobID string
	// Vars are the variables Detect read that were set, in the order
	// read.
	Vars []Var
}

// MultiNode reports whether the job spans more than this node.
func (e Env) MultiNode() bool { return e.LocalWorldSize < e.WorldSize }

// Lookup reads one environment variable, as os.LookupEnv does.
type Lookup func(name string) (string, bool)

// reader reads variables through a Lookup, recording those that are set.
type reader struct {
	lookup Lookup
	vars   []Var
	seen   map[string]bool
}

func (r *reader) get(name string) (string, bool) {
	v, ok := r.lookup(name)
	if ok && !r.seen[name] {
		r.seen[name] = true
		r.vars = append(r.vars, Var{name, v})
	}
	return v, ok
}

func (r *reader) has(name string) bool {
	_, ok := r.get(name)
	return ok
}

// int reads a non-negative integer variable.
func (r *reader) int(name string) (int, error) {
	s, ok := r.get(name)
	if !ok {
		return 0, fmt.Errorf("%w: %s is not set", ErrEnv, name)
	}
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: %s=%q is not a non-negative integer", ErrEnv, name, s)
	}
	return n, nil
}

// first returns the first of names that is set.
func (r *reader) first(names ...string) (name, value string, ok bool) {
	for _, n := range names {
		if v, ok := r.get(n); ok {
			return n, v, true
		}
	}
	return "", "", false
}

// Detect finds the worker's place from the variables lookup reads, trying
// the engines in the order of the Engine constants: torchrun's variables
// (which gotrain run sets, also inside a Slurm step or a pod), a Slurm
// step, Open MPI, a PMI launcher, a Kubeflow TrainJob, a Kubeflow
// PyTorchJob, RANK and WORLD_SIZE alone, and otherwise a single process.
// The error names the variables that are missing, malformed or
// contradictory; the Env returned with it names the engine whose
// variables they are.
func Detect(lookup Lookup) (Env, error) {
	return detect(lookup, CPUs)
}

func detect(lookup Lookup, cpus func() int) (Env, error) {
	r := &reader{lookup: lookup, seen: map[string]bool{}}
	e, err := r.detect(cpus)
	e.Vars = r.vars
	if err != nil {
		return e, err
	}
	if err := e.check(); err != nil {
		return e, err
	}
	return e, nil
}

func (r *reader) detect(cpus func() int) (Env, error) {
	switch {
	case r.has("LOCAL_RANK"):
		return r.torchrun()
	case r.has("SLURM_PROCID") || r.has("SLURM_JOB_ID"):
		e, err, ok := r.slurm()
		if ok {
			return e, err
		}
	}
	switch {
	case r.has("OMPI_COMM_WORLD_RANK") || r.has("OMPI_COMM_WORLD_SIZE"):
		return r.openMPI()
	case r.has("PMI_RANK") || r.has("PMI_SIZE"):
		return r.mpich()
	case !r.has("RANK") && !r.has("WORLD_SIZE") && (r.has("PET_NODE_RANK") || r.has("PET_NNODES")):
		return r.trainJob(cpus)
	case r.has("RANK") && r.has("WORLD_SIZE") && (r.has("PET_NODE_RANK") || r.has("PET_NPROC_PER_NODE") || r.has("PET_NNODES")):
		return r.pyTorchJob(cpus)
	case r.has("RANK") || r.has("WORLD_SIZE"):
		e, err := r.static(Static)
		if err == nil && e.WorldSize > 1 {
			err = r.master(&e, "MASTER_ADDR", "MASTER_PORT")
		}
		return e, err
	}
	return Env{Engine: None, WorldSize: 1, LocalWorldSize: 1, NNodes: 1}, nil
}

// static reads RANK and WORLD_SIZE (and LOCAL_WORLD_SIZE, GROUP_RANK when
// set) as torchrun's contract defines them.
func (r *reader) static(engine Engine) (Env, error) {
	e := Env{Engine: engine, NodeRank: -1}
	var err error
	if e.Rank, err = r.int("RANK"); err != nil {
		return e, r.incomplete(err, "RANK", "WORLD_SIZE")
	}
	if e.WorldSize, err = r.int("WORLD_SIZE"); err != nil {
		return e, r.incomplete(err, "RANK", "WORLD_SIZE")
	}
	e.LocalWorldSize, e.NNodes = e.WorldSize, 1
	if r.has("LOCAL_WORLD_SIZE") {
		if e.LocalWorldSize, err = r.int("LOCAL_WORLD_SIZE"); err != nil {
			return e, err
		}
	}
	if r.has("GROUP_RANK") {
		if e.NodeRank, err = r.int("GROUP_RANK"); err != nil {
			return e, err
		}
	}
	if r.has("GROUP_WORLD_SIZE") {
		if e.NNodes, err = r.int("GROUP_WORLD_SIZE"); err != nil {
			return e, err
		}
	} else if e.LocalWorldSize > 0 && e.WorldSize%e.LocalWorldSize == 0 {
		e.NNodes = e.WorldSize / e.LocalWorldSize
	}
	return e, nil
}

// incomplete turns a missing-variable error into one naming the group of
// variables that belong together.
func (r *reader) incomplete(err error, group ...string) error {
	var missing, set []string
	for _, n := range group {
		if v, ok := r.get(n); ok {
			set = append(set, n+"="+v)
		} else {
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		return err
	}
	return fmt.Errorf("%w: %s set but %s not: set both or neither", ErrEnv, strings.Join(set, " "), strings.Join(missing, ", "))
}

func (r *reader) torchrun() (Env, error) {
	e, err := r.static(Torchrun)
	if err != nil {
		return e, err
	}
	if e.LocalRank, err = r.int("LOCAL_RANK"); err != nil {
		return e, err
	}
	if e.WorldSize > 1 || r.has("MASTER_ADDR") {
		err = r.master(&e, "MASTER_ADDR", "MASTER_PORT")
	}
	return e, err
}

// master takes the store's address from the two variables, which must
// both be set.
func (r *reader) master(e *Env, addrVar, portVar string) error {
	addr, okA := r.get(addrVar)
	port, okP := r.get(portVar)
	switch {
	case !okA && !okP:
		return fmt.Errorf("%w: %s and %s are not set (world size %d): set them to rank 0's host and a free port", ErrEnv, addrVar, portVar, e.WorldSize)
	case !okA || addr == "":
		return fmt.Errorf("%w: %s is not set (%s=%s, world size %d): set it to rank 0's host", ErrEnv, addrVar, portVar, port, e.WorldSize)
	case !okP || port == "":
		return fmt.Errorf("%w: %s is not set (%s=%s, world size %d): set it to a free port on rank 0's host", ErrEnv, portVar, addrVar, addr, e.WorldSize)
	}
	e.MasterAddr, e.MasterPort, e.MasterFrom = addr, port, addrVar+", "+portVar
	return nil
}

// agree refuses RANK and WORLD_SIZE set beside an engine's own variables
// with other values: a script that exported RANK once for every task
// would otherwise give all of them rank 0.
func (r *reader) agree(e Env, rankVar, sizeVar string) error {
	for _, c := range []struct {
		name, engineVar string
		want            int
	}{{"RANK", rankVar, e.Rank}, {"WORLD_SIZE", sizeVar, e.WorldSize}} {
		s, ok := r.get(c.name)
		if !ok {
			continue
		}
		if n, err := strconv.Atoi(strings.TrimSpace(s)); err != nil || n != c.want {
			return fmt.Errorf("%w: %s=%s contradicts %s=%d (%s): unset %s, %s derives it", ErrEnv, c.name, s, c.engineVar, c.want, e.Engine, c.name, e.Engine)
		}
	}
	return nil
}

// masterOverride takes MASTER_ADDR and MASTER_PORT when the user set
// them; it reports whether the address was set.
func (r *reader) masterOverride(e *Env) bool {
	if p, ok := r.get("MASTER_PORT"); ok && p != "" {
		e.MasterPort, e.MasterFrom = p, "MASTER_PORT"
	}
	a, ok := r.get("MASTER_ADDR")
	if !ok || a == "" {
		return false
	}
	e.MasterAddr = a
	if e.MasterFrom == "" {
		e.MasterFrom = "MASTER_ADDR"
	} else {
		e.MasterFrom = "MASTER_ADDR, MASTER_PORT"
	}
	return true
}

// jobPort derives the store port from a job id (a number, or any string,
// hashed).
func jobPort(id string) int {
	n, err := strconv.ParseUint(id, 10, 64)
	if err != nil {
		h := fnv.New64a()
		h.Write([]byte(id))
		n = h.Sum64()
	}
	return JobPortBase + int(n%JobPortSpan)
}

// slurm reads a Slurm task's variables; ok is false when they are a batch
// script's, not a step's, and RANK or WORLD_SIZE say more.
func (r *reader) slurm() (e Env, err error, ok bool) {
	e = Env{Engine: Slurm} // also on error: callers see whose variables failed
	_, _, inStep := r.first("SLURM_STEP_ID", "SLURM_STEPID")
	if !inStep {
		// A batch script (or salloc shell) is not a task of a step: its
		// SLURM_NTASKS counts the tasks srun would start.
		if r.has("RANK") || r.has("WORLD_SIZE") {
			return Env{}, nil, false
		}
		n := 1
		if r.has("SLURM_NTASKS") {
			if n, err = r.int("SLURM_NTASKS"); err != nil {
				return e, err, true
			}
		}
		if n > 1 {
			return e, fmt.Errorf("%w: SLURM_JOB_ID is set but SLURM_STEP_ID is not: this is the batch script of a job of SLURM_NTASKS=%d tasks, not one of its tasks; start the workers with srun", ErrEnv, n), true
		}
		return Env{Engine: None, WorldSize: 1, LocalWorldSize: 1, NNodes: 1}, nil, true
	}
	need := []string{"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NNODES", "SLURM_JOB_ID"}
	var missing []string
	for _, n := range need {
		if !r.has(n) {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return e, fmt.Errorf("%w: a Slurm step without %s: is this srun's environment, copied incompletely?", ErrEnv, strings.Join(missing, ", ")), true
	}
	for _, f := range []struct {
		dst  *int
		name string
	}{{&e.Rank, "SLURM_PROCID"}, {&e.WorldSize, "SLURM_NTASKS"}, {&e.LocalRank, "SLURM_LOCALID"}, {&e.NodeRank, "SLURM_NODEID"}, {&e.NNodes, "SLURM_NNODES"}} {
		if *f.dst, err = r.int(f.name); err != nil {
			return e, err, true
		}
	}
	jobID, _ := r.get("SLURM_JOB_ID")
	step, _ := r.get("SLURM_STEP_ID")
	e.JobID = "slurm-" + jobID + "." + step
	// The step's own lists when srun ran on part of the allocation.
	tpnVar, tpn, ok := r.first("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
	if !ok {
		return e, fmt.Errorf("%w: a Slurm step without SLURM_STEP_TASKS_PER_NODE or SLURM_TASKS_PER_NODE", ErrEnv), true
	}
	counts, err := ParseTasksPerNode(tpn)
	if err != nil {
		return e, fmt.Errorf("%w: %s: %w", ErrEnv, tpnVar, err), true
	}
	sum := 0
	for _, c := range counts {
		sum += c
	}
	switch {
	case len(counts) != e.NNodes:
		return e, fmt.Errorf("%w: %s=%s names %d nodes, SLURM_NNODES=%d", ErrEnv, tpnVar, tpn, len(counts), e.NNodes), true
	case sum != e.WorldSize:
		return e, fmt.Errorf("%w: %s=%s adds up to %d tasks, SLURM_NTASKS=%d", ErrEnv, tpnVar, tpn, sum, e.WorldSize), true
	case e.NodeRank >= e.NNodes:
		return e, fmt.Errorf("%w: SLURM_NODEID=%d is outside SLURM_NNODES=%d", ErrEnv, e.NodeRank, e.NNodes), true
	}
	e.LocalWorldSize = counts[e.NodeRank]
	if err := r.agree(e, "SLURM_PROCID", "SLURM_NTASKS"); err != nil {
		return e, err, true
	}
	// The port: MASTER_PORT, else derived from the job id, which every
	// task of the job knows.
	e.MasterPort, e.MasterFrom = strconv.Itoa(jobPort(jobID)), "SLURM_JOB_ID"
	if r.masterOverride(&e) {
		return e, nil, true
	}
	listVar, list, ok := r.first("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
	if !ok {
		return e, fmt.Errorf("%w: a Slurm step without SLURM_STEP_NODELIST, SLURM_JOB_NODELIST or MASTER_ADDR: cannot tell rank 0's host", ErrEnv), true
	}
	hosts, err := ParseNodeList(list)
	if err != nil {
		return e, fmt.Errorf("%w: %s: %w", ErrEnv, listVar, err), true
	}
	if len(hosts) != e.NNodes {
		return e, fmt.Errorf("%w: %s=%s names %d hosts, SLURM_NNODES=%d", ErrEnv, listVar, list, len(hosts), e.NNodes), true
	}
	// Slurm's default block distribution puts rank 0 on the first host.
	e.MasterAddr = hosts[0]
	e.MasterFrom = "the first host of " + listVar + ", port " + e.MasterFrom
	return e, nil, true
}

func (r *reader) openMPI() (Env, error) {
	e := Env{Engine: OpenMPI, NodeRank: -1}
	var err error
	for _, f := range []struct {
		dst  *int
		name string
	}{{&e.Rank, "OMPI_COMM_WORLD_RANK"}, {&e.WorldSize, "OMPI_COMM_WORLD_SIZE"}, {&e.LocalRank, "OMPI_COMM_WORLD_LOCAL_RANK"}, {&e.LocalWorldSize, "OMPI_COMM_WORLD_LOCAL_SIZE"}} {
		if *f.dst, err = r.int(f.name); err != nil {
			return e, err
		}
	}
	if err := r.agree(e, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"); err != nil {
		return e, err
	}
	e.NNodes = nodesOf(e)
	e.MasterPort, e.MasterFrom = strconv.Itoa(DefaultMasterPort), "the default port"
	if id, ok := r.get("OMPI_MCA_ess_base_jobid"); ok && id != "" {
		e.JobID = "ompi-" + id
		e.MasterPort, e.MasterFrom = strconv.Itoa(jobPort(id)), "OMPI_MCA_ess_base_jobid"
	}
	if r.masterOverride(&e) {
		return e, nil
	}
	if e.MultiNode() {
		// Open MPI's PMIx is not a wire protocol a static binary can
		// speak; the user names rank 0's host.
		return e, fmt.Errorf("%w: Open MPI job on several nodes (OMPI_COMM_WORLD_LOCAL_SIZE=%d < OMPI_COMM_WORLD_SIZE=%d) without MASTER_ADDR: pass rank 0's host with mpirun -x MASTER_ADDR=<host>", ErrEnv, e.LocalWorldSize, e.WorldSize)
	}
	e.MasterAddr, e.MasterFrom = "127.0.0.1", "this host (every rank is on it), port "+e.MasterFrom
	return e, nil
}

func (r *reader) mpich() (Env, error) {
	e := Env{Engine: MPICH, NodeRank: -1}
	var err error
	if e.Rank, err = r.int("PMI_RANK"); err != nil {
		return e, r.incomplete(err, "PMI_RANK", "PMI_SIZE")
	}
	if e.WorldSize, err = r.int("PMI_SIZE"); err != nil {
		return e, r.incomplete(err, "PMI_RANK", "PMI_SIZE")
	}
	e.LocalWorldSize = e.WorldSize
	if r.has("MPI_LOCALRANKID") || r.has("MPI_LOCALNRANKS") {
		if e.LocalRank, err = r.int("MPI_LOCALRANKID"); err != nil {
			return e, err
		}
		if e.LocalWorldSize, err = r.int("MPI_LOCALNRANKS"); err != nil {
			return e, err
		}
	}
	if err := r.agree(e, "PMI_RANK", "PMI_SIZE"); err != nil {
		return e, err
	}
	e.NNodes = nodesOf(e)
	if r.masterOverride(&e) {
		if e.MasterPort == "" {
			e.MasterPort = strconv.Itoa(DefaultMasterPort)
			e.MasterFrom += ", the default port"
		}
		return e, nil
	}
	if _, _, ok := r.first("PMI_FD", "PMI_PORT"); ok {
		e.PMI, e.MasterFrom = true, "rank 0, through the launcher's PMI key-value space"
		if r.has("PMI_PORT") && !r.has("PMI_FD") && !r.has("PMI_ID") {
			return e, fmt.Errorf("%w: PMI_PORT is set without PMI_ID", ErrEnv)
		}
		return e, nil
	}
	if e.MultiNode() {
		return e, fmt.Errorf("%w: PMI_RANK and PMI_SIZE are set but neither PMI_FD nor PMI_PORT (no PMI service) nor MASTER_ADDR: pass rank 0's host in MASTER_ADDR", ErrEnv)
	}
	e.MasterAddr, e.MasterPort, e.MasterFrom = "127.0.0.1", strconv.Itoa(DefaultMasterPort), "this host (every rank is on it), the default port"
	return e, nil
}

// nodesOf is the number of nodes when every node runs as many ranks as
// this one, 0 when that cannot be.
func nodesOf(e Env) int {
	if e.LocalWorldSize > 0 && e.WorldSize%e.LocalWorldSize == 0 {
		return e.WorldSize / e.LocalWorldSize
	}
	return 0
}

// nprocPerNode reads PET_NPROC_PER_NODE: a number, or auto/cpu for this
// container's CPUs (its quota).
func (r *reader) nprocPerNode(cpus func() int) (int, error) {
	s, ok := r.get("PET_NPROC_PER_NODE")
	if !ok {
		return 1, nil
	}
	switch s {
	case "auto", "cpu":
		return cpus(), nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%w: PET_NPROC_PER_NODE=%q is not a positive number, auto or cpu", ErrEnv, s)
	}
	return n, nil
}

// needLauncher is the error for a pod that runs more than one worker but
// started the program directly.
func needLauncher(engine Engine, nproc int) error {
	return fmt.Errorf("%w: %s with PET_NPROC_PER_NODE=%d workers per node, but this process was started directly, not by a launcher: start the program with `gotrain run PROGRAM`, which reads PET_NNODES, PET_NODE_RANK, PET_NPROC_PER_NODE, PET_MASTER_ADDR and PET_MASTER_PORT", ErrEnv, engine, nproc)
}

func (r *reader) trainJob(cpus func() int) (Env, error) {
	e := Env{Engine: TrainJob}
	var err error
	if e.NodeRank, err = r.int("PET_NODE_RANK"); err != nil {
		return e, r.incomplete(err, "PET_NODE_RANK", "PET_NNODES")
	}
	if e.NNodes, err = r.int("PET_NNODES"); err != nil {
		return e, r.incomplete(err, "PET_NODE_RANK", "PET_NNODES")
	}
	nproc, err := r.nprocPerNode(cpus)
	if err != nil {
		return e, err
	}
	if nproc > 1 {
		return e, needLauncher(e.Engine, nproc)
	}
	e.Rank, e.WorldSize, e.LocalWorldSize = e.NodeRank, e.NNodes, 1
	if e.WorldSize > 1 {
		err = r.master(&e, "PET_MASTER_ADDR", "PET_MASTER_PORT")
	}
	return e, err
}

func (r *reader) pyTorchJob(cpus func() int) (Env, error) {
	e, err := r.static(PyTorchJob)
	if err != nil {
		return e, err
	}
	nproc, err := r.nprocPerNode(cpus)
	if err != nil {
		return e, err
	}
	// RANK is the pod's index, the node rank: a rank only with one worker
	// per pod.
	if nproc > 1 {
		return e, needLauncher(e.Engine, nproc)
	}
	e.NodeRank, e.LocalWorldSize = e.Rank, 1
	if s, ok := r.get("PET_NODE_RANK"); ok && s != strconv.Itoa(e.Rank) {
		return e, fmt.Errorf("%w: PET_NODE_RANK=%s contradicts RANK=%d", ErrEnv, s, e.Rank)
	}
	e.NNodes = e.WorldSize
	if r.has("PET_NNODES") {
		if e.NNodes, err = r.int("PET_NNODES"); err != nil {
			return e, err
		}
		if e.NNodes != e.WorldSize {
			return e, fmt.Errorf("%w: WORLD_SIZE=%d contradicts PET_NNODES=%d with one worker per pod", ErrEnv, e.WorldSize, e.NNodes)
		}
	}
	if e.WorldSize > 1 {
		err = r.master(&e, "MASTER_ADDR", "MASTER_PORT")
	}
	return e, err
}

// check validates the ranges every engine's values must respect.
func (e Env) check() error {
	switch {
	case e.WorldSize < 1:
		return fmt.Errorf("%w: %s: world size %d, want at least 1%s", ErrEnv, e.Engine, e.WorldSize, e.from())
	case e.Rank >= e.WorldSize:
		return fmt.Errorf("%w: %s: rank %d is outside world size %d%s", ErrEnv, e.Engine, e.Rank, e.WorldSize, e.from())
	case e.LocalWorldSize < 1 || e.LocalWorldSize > e.WorldSize:
		return fmt.Errorf("%w: %s: local world size %d is outside 1..%d (the world size)%s", ErrEnv, e.Engine, e.LocalWorldSize, e.WorldSize, e.from())
	case e.LocalRank >= e.LocalWorldSize:
		return fmt.Errorf("%w: %s: local rank %d is outside local world size %d%s", ErrEnv, e.Engine, e.LocalRank, e.LocalWorldSize, e.from())
	case e.NNodes > 0 && e.NodeRank >= e.NNodes:
		return fmt.Errorf("%w: %s: node rank %d is outside %d nodes%s", ErrEnv, e.Engine, e.NodeRank, e.NNodes, e.from())
	}
	if e.WorldSize > 1 && !e.PMI && e.MasterPort != "" {
		if p, err := strconv.Atoi(e.MasterPort); err != nil || p < 1 || p > 65535 {
			return fmt.Errorf("%w: %s: master port %q is not a port in 1..65535 (from %s)", ErrEnv, e.Engine, e.MasterPort, e.MasterFrom)
		}
	}
	return nil
}

// from lists the variables read, for an error message.
func (e Env) from() string {
	if len(e.Vars) == 0 {
		return ""
	}
	parts := make([]string, len(e.Vars))
	for i, v := range e.Vars {
		parts[i] = v.Name + "=" + v.Value
	}
	return " (from " + strings.Join(parts, " ") + ")"
}

// Native reports whether e comes from an engine's own variables (Slurm,
// MPI, Kubeflow) rather than torchrun's RANK and WORLD_SIZE, which
// callers that already read those keep reading themselves.
func (e Env) Native() bool {
	switch e.Engine {
	case Torchrun, Static, None, "":
		return false
	}
	return true
}
