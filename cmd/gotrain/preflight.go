package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"

	"github.com/gotrain/gotrain/distributed/shm"
	"github.com/gotrain/gotrain/launch"
)

// warnBeforeStart logs, before any worker of cfg starts, one warning line
// for each choice that runs but costs the user: more local workers than
// CPUs, and more shared memory than /dev/shm has free. Neither stops the
// job; the line says what it costs and what to do.
func warnBeforeStart(cfg launch.Config) {
	log := cfg.Logger
	if log == nil { // as launch.Run's own log
		var w io.Writer = os.Stderr
		if cfg.Stderr != nil {
			w = cfg.Stderr
		}
		log = slog.New(slog.NewTextHandler(w, nil))
	}
	if msg := cpuWarning(cfg.NProcPerNode, runtime.NumCPU()); msg != "" {
		log.Warn(msg, "nproc_per_node", cfg.NProcPerNode, "cpus", runtime.NumCPU())
	}
	if !shm.Enabled() {
		return
	}
	need := shm.Need(cfg.NProcPerNode, max(1, cfg.NNodes)*cfg.NProcPerNode)
	if need == 0 {
		return
	}
	free, err := shm.Free()
	if err != nil {
		log.Warn("gotrain: /dev/shm is not usable, so allreduce and same-host pairs go over TCP (slower); set GOTRAIN_SHM=0 to silence this", "err", err)
		return
	}
	if msg := shmWarning(cfg.NProcPerNode, need, free); msg != "" {
		log.Warn(msg, "need_bytes", need, "free_bytes", free)
	}
}

// cpuWarning is the warning for nproc local workers on cpus CPUs, "" if
// they fit.
func cpuWarning(nproc, cpus int) string {
	if nproc <= cpus {
		return ""
	}
	return fmt.Sprintf("gotrain: --nproc-per-node %d is more than the %d CPUs here: workers share CPUs (each step waits for ranks that are not running) and allreduce waits spin less before they sleep, so they wake later; %d or fewer is usually faster",
		nproc, cpus, cpus)
}

// shmWarning is the warning for nproc local workers that need need bytes
// of /dev/shm where free are free, "" if they fit.
func shmWarning(nproc int, need, free int64) string {
	if need <= free {
		return ""
	}
	return fmt.Sprintf("gotrain: %d local workers need %s of shared memory but /dev/shm has %s free: the allreduce arena and the same-host pairs that do not fit fall back to TCP (slower); give it more (docker run --shm-size=%s) or set GOTRAIN_SHM=0 to use TCP only",
		nproc, sizeString(need), sizeString(free), dockerSize(need))
}

// sizeString shows n bytes in MiB, or GiB from 1 GiB on.
func sizeString(n int64) string {
	if n >= 1<<30 {
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	}
	return fmt.Sprintf("%d MiB", (n+1<<20-1)>>20)
}

// dockerSize is a --shm-size that holds n bytes with room for what else
// uses /dev/shm: n plus a quarter, rounded up to whole GiB (or 256 MiB
// steps below 1 GiB), in docker's syntax.
func dockerSize(n int64) string {
	n += n / 4
	if n < 1<<30 {
		return fmt.Sprintf("%dm", (n+256<<20-1)/(256<<20)*256)
	}
	return fmt.Sprintf("%dg", (n+1<<30-1)>>30)
}
