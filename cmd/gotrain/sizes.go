package main

import (
	"fmt"
	"log/slog"
	"strconv"

	"github.com/spf13/pflag"

	"github.com/gotrain/gotrain/distributed/shm"
	"github.com/gotrain/gotrain/jobs/jobflag"
	"github.com/gotrain/gotrain/launch/machine"
)

// The bounds of what `gotrain run` and `gotrain train` start on one
// machine, checked before any worker starts; --force starts beyond them.
const (
	// maxWorkersPerCPU bounds the local workers by the CPUs: beyond it
	// each worker gets too little CPU for its collectives to keep time.
	maxWorkersPerCPU = 8
	// minWorkersBound is the least bound on local workers, however few
	// the CPUs.
	minWorkersBound = 8
	// launcherFilesPerWorker are the launcher's descriptors per worker:
	// its ends of the stdout, stderr and events pipes, three log files
	// and two to spare.
	launcherFilesPerWorker = 8
	// filesReserve are the descriptors a process holds besides those that
	// grow with the workers: standard streams, the store, listeners,
	// shared-memory files, the binary and its data.
	filesReserve = 64
	// programWorkerBytes is the least memory a worker of `gotrain run`,
	// any program, is counted for: a small process with its runtime.
	programWorkerBytes = 16 << 20
)

// forceFlag is --force: start workers beyond the machine's bounds.
type forceFlag struct{ on bool }

// register defines the flag on f.
func (ff *forceFlag) register(f *pflag.FlagSet) {
	f.BoolVar(&ff.on, "force", false, "start the workers even where the launcher expects them not to fit this machine (more than 8 per CPU, more open files than the limit, more memory than is available)")
}

// sizeCheck is what a job's local workers ask of this machine.
type sizeCheck struct {
	nproc     int    // local workers
	nprocFlag string // --nproc-per-node as typed
	world     int    // workers of the whole job
	// mesh is set for gotrain's own workers, which connect to every
	// other rank: each needs a descriptor per rank.
	mesh bool
	// memory is one worker's need as its job estimates it; a zero
	// Bytes counts programWorkerBytes, for any program.
	memory jobflag.Memory
}

// check refuses, with one line naming the flag, the need and what the
// machine has, workers that r cannot hold. A zero reading skips its check.
func (s sizeCheck) check(r machine.Resources) error {
	if r.CPUs > 0 {
		if bound := max(minWorkersBound, maxWorkersPerCPU*r.CPUs); s.nproc > bound {
			return badFlag("nproc-per-node", s.nprocFlag, fmt.Sprintf(
				"more than %d local workers (%d per CPU, %d CPUs here) would each get too little CPU for their collectives to keep time",
				bound, maxWorkersPerCPU, r.CPUs))
		}
	}
	if r.NoFile > 0 {
		if need := uint64(s.nproc)*launcherFilesPerWorker + filesReserve; need > r.NoFile {
			return badFlag("nproc-per-node", s.nprocFlag, fmt.Sprintf(
				"the launcher needs %d open files for %d workers (pipes and log files) and may open %d (ulimit -n)",
				need, s.nproc, r.NoFile))
		}
		if need := uint64(s.world) + filesReserve; s.mesh && need > r.NoFile {
			return badFlag("nproc-per-node", s.nprocFlag, fmt.Sprintf(
				"each worker needs %d open files for its connections to the other %d ranks and may open %d (ulimit -n)",
				need, s.world-1, r.NoFile))
		}
	}
	if r.MemAvailable <= 0 {
		return nil
	}
	per := s.memory.Bytes
	if per == 0 {
		per = programWorkerBytes
	}
	shmNeed := int64(0)
	if r.ShmFree > 0 && s.nproc >= 2 && s.nproc <= s.world {
		// Beyond /dev/shm's free space the workers use TCP instead.
		shmNeed = min(shm.Need(s.nproc, s.world), r.ShmFree)
	}
	total := float64(per)*float64(s.nproc) + float64(shmNeed)
	if total <= float64(r.MemAvailable) {
		return nil
	}
	have := fmt.Sprintf("%s is available (%s)", jobflag.Bytes(float64(r.MemAvailable)), r.MemSource)
	what := "a worker of any program is counted for " + jobflag.Bytes(programWorkerBytes)
	if s.memory.Bytes > 0 {
		what = s.memory.Parts
	}
	need := "needs about " + jobflag.Bytes(total) + " of memory (" + what
	if s.nproc > 1 {
		need = fmt.Sprintf("%d workers need about %s of memory (%s each: %s", s.nproc, jobflag.Bytes(total), jobflag.Bytes(float64(per)), what)
	}
	if shmNeed > 0 {
		need += "; shared memory " + jobflag.Bytes(float64(shmNeed))
	}
	msg := need + ") and " + have
	// The job's own size flag when one worker does not fit; else the count.
	if s.memory.Bytes > 0 && float64(per) > float64(r.MemAvailable) {
		return badFlag(s.memory.Flag, strconv.Itoa(s.memory.Value), msg)
	}
	return badFlag("nproc-per-node", s.nprocFlag, msg)
}

// checkSizes checks s against this machine's readings; with force a
// refusal is logged as a warning and the job goes on.
func checkSizes(s sizeCheck, force bool) error {
	return checkSizesOn(s, force, machine.Read(), slog.Default())
}

// checkSizesOn is checkSizes with the readings r, warning on log.
func checkSizesOn(s sizeCheck, force bool, r machine.Resources, log *slog.Logger) error {
	err := s.check(r)
	switch {
	case err == nil:
		return nil
	case force:
		log.Warn("gotrain: starting anyway (--force): " + err.Error())
		return nil
	}
	return usagef("%s (--force starts anyway)", err)
}
