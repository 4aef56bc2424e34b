// Package cpu decides whether a process has a CPU to spare for background
// work: the one policy behind DDP's overlap default (ddp.OverlapComm) and
// the loader's prefetch default (data.Prefetch).
//
// A goroutine working beside the compute threads (reducing gradients,
// assembling the next batch) is only free when it runs on a CPU no compute
// thread wants. When several ranks share a host and their compute threads
// already take all its CPUs (what the launcher arranges by default), such
// a goroutine takes turns with some rank's compute instead, delaying that
// rank, and every rank waits for the slowest at each allreduce. A lone
// process has nobody waiting for it, and its compute threads idle between
// parallel regions, so it counts as having a spare CPU.
package cpu

import "runtime"

// Spare reports whether a background goroutine of one process would run
// on a CPU of its own, when ranks processes share this host and each runs
// threads compute threads: true for a single rank, else when
// ranks × threads < the CPUs of this host.
func Spare(ranks, threads int) bool {
	return ranks <= 1 || ranks*threads < runtime.NumCPU()
}
