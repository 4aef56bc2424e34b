// Package machine reads what this machine can give a job before it
// starts: its CPUs, the memory still available to this process (the
// kernel's MemAvailable, or its memory cgroup's limit less what the
// cgroup uses, whichever is lower), the open-file limit and the free
// space of /dev/shm. The launcher and `gotrain train` size their workers
// against these readings.
package machine

import (
	"bufio"
	"bytes"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/gotrain/gotrain/distributed/clusterenv"
	"github.com/gotrain/gotrain/distributed/shm"
)

// Resources are the readings. A zero field is a reading that failed or
// that this system does not have: the checks that need it are skipped.
type Resources struct {
	// CPUs this process may use, capped by its container's quota.
	CPUs int
	// MemAvailable is how many bytes this process can still allocate
	// without swapping or meeting its cgroup's limit.
	MemAvailable int64
	// MemSource names where MemAvailable comes from, for messages:
	// "MemAvailable in /proc/meminfo" or "cgroup v2 memory.max".
	MemSource string
	// NoFile is this process's soft RLIMIT_NOFILE, the descriptors it may
	// hold open (Go raises it to the hard limit at start).
	NoFile uint64
	// ShmFree is /dev/shm's free bytes, or 0 when shared memory is off or
	// unusable.
	ShmFree int64
}

// Read takes the readings of this process.
func Read() Resources {
	r := Resources{CPUs: clusterenv.CPUs()}
	r.MemAvailable, r.MemSource = memAvailable(os.ReadFile)
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil {
		r.NoFile = lim.Cur
	}
	if shm.Enabled() {
		if free, err := shm.Free(); err == nil {
			r.ShmFree = free
		}
	}
	return r
}

// memAvailable is the lower of /proc/meminfo's MemAvailable and what the
// memory cgroup of this process (or any cgroup above it) lets it still
// use, with the file's name; (0, "") if neither can be read.
func memAvailable(read func(string) ([]byte, error)) (int64, string) {
	avail, source := int64(0), ""
	if b, err := read("/proc/meminfo"); err == nil {
		if kb, ok := field(b, "MemAvailable:"); ok {
			avail, source = kb*1024, "MemAvailable in /proc/meminfo"
		}
	}
	if left, src, ok := cgroupLeft(read); ok && (source == "" || left < avail) {
		avail, source = left, src
	}
	return avail, source
}

// field is the number after key in a "key value [kB]" file such as
// /proc/meminfo or memory.stat.
func field(b []byte, key string) (int64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == key {
			v, err := strconv.ParseInt(f[1], 10, 64)
			return v, err == nil
		}
	}
	return 0, false
}

// cgroupLeft is the memory this process's cgroups still allow: the least,
// over its cgroup and every one above it that has a limit, of the limit
// less the cgroup's usage without its inactive page cache (which the
// kernel reclaims before it refuses memory, as kubelet counts a working
// set), with the name of the limit's file.
func cgroupLeft(read func(string) ([]byte, error)) (left int64, source string, ok bool) {
	self, err := read("/proc/self/cgroup")
	if err != nil {
		return 0, "", false
	}
	consider := func(dir string, v cgroupFiles) {
		lim, found := number(read, path.Join(dir, v.limit))
		if !found {
			return // no limit here ("max"), or no such cgroup
		}
		used, _ := number(read, path.Join(dir, v.usage))
		if st, err := read(path.Join(dir, "memory.stat")); err == nil {
			if inactive, found := field(st, v.inactive); found && inactive <= used {
				used -= inactive
			}
		}
		if l := max(0, lim-used); !ok || l < left {
			left, source, ok = l, v.name, true
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(self))
	for sc.Scan() {
		// hierarchy-ID:controller-list:cgroup-path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			for _, dir := range ancestors("/sys/fs/cgroup", parts[2]) {
				consider(dir, cgroupV2)
			}
		case slices.Contains(strings.Split(parts[1], ","), "memory"):
			for _, dir := range ancestors("/sys/fs/cgroup/memory", parts[2]) {
				consider(dir, cgroupV1)
			}
		}
	}
	return left, source, ok
}

// cgroupFiles name a cgroup version's memory files.
type cgroupFiles struct{ name, limit, usage, inactive string }

var (
	cgroupV2 = cgroupFiles{"cgroup v2 memory.max", "memory.max", "memory.current", "inactive_file"}
	cgroupV1 = cgroupFiles{"cgroup v1 memory.limit_in_bytes", "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"}
)

// ancestors are the directories of cgroup p under root and of every
// cgroup above it, root last. The root itself is where a container with
// its own cgroup namespace sees its limit.
func ancestors(root, p string) []string {
	var dirs []string
	for p = path.Clean("/" + p); p != "/"; p = path.Dir(p) {
		dirs = append(dirs, path.Join(root, p))
	}
	return append(dirs, root)
}

// number reads a file holding one integer ("max" and the like: false).
func number(read func(string) ([]byte, error), name string) (int64, bool) {
	b, err := read(name)
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return v, err == nil
}
