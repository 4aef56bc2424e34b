package clusterenv

import (
	"os"
	"runtime"
	"strconv"
	"strings"
)

// CPUs is the number of CPUs this process may use: the CPUs it may run
// on, capped by its container's CPU quota (cgroup v2 cpu.max, or v1
// cpu.cfs_quota_us), rounded up. It is what "auto" means for
// PET_NPROC_PER_NODE and --nproc-per-node, as Kubernetes limits a pod's
// CPUs by quota and not by the CPUs it sees.
func CPUs() int {
	return cpusFrom(runtime.NumCPU(), os.ReadFile)
}

func cpusFrom(n int, read func(string) ([]byte, error)) int {
	if q, ok := quota(read); ok && q < n {
		return q
	}
	return n
}

// quota reads the CPU quota in whole CPUs (at least 1), if there is one.
func quota(read func(string) ([]byte, error)) (int, bool) {
	if b, err := read("/sys/fs/cgroup/cpu.max"); err == nil {
		f := strings.Fields(string(b))
		if len(f) == 2 && f[0] != "max" {
			return ratio(f[0], f[1])
		}
		return 0, false
	}
	q, err1 := read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
	p, err2 := read("/sys/fs/cgroup/cpu/cpu.cfs_period_us")
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return ratio(strings.TrimSpace(string(q)), strings.TrimSpace(string(p)))
}

func ratio(quota, period string) (int, bool) {
	q, err1 := strconv.ParseInt(quota, 10, 64)
	p, err2 := strconv.ParseInt(period, 10, 64)
	if err1 != nil || err2 != nil || q <= 0 || p <= 0 {
		return 0, false
	}
	return int(max(1, (q+p-1)/p)), true
}
