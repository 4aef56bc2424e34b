package shm

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// supported: Linux has a tmpfs /dev/shm, fallocate and futexes.
const supported = true

// removeStaleOnce makes a process's first Create remove the files that
// killed processes left, so that its group finds the space they held.
var removeStaleOnce sync.Once

// Create makes a file of n bytes in /dev/shm, named for this process and
// kind (see FilePattern), reserves and maps it. The caller removes the
// file (once its peers have mapped it) and unmaps mem. A process's first
// Create first removes the stale files of gone processes (RemoveStale).
func Create(kind string, n int) (path string, mem []byte, err error) {
	pattern := namePattern(kind)
	removeStaleOnce.Do(func() { _, _, _ = RemoveStale("") }) // best effort: a file it cannot remove only costs space
	f, err := os.CreateTemp(shmDir, pattern)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	err = f.Truncate(int64(n))
	if err == nil {
		err = syscall.Fallocate(int(f.Fd()), 0, 0, int64(n))
	}
	if err != nil {
		os.Remove(f.Name())
		return "", nil, fmt.Errorf("reserve %d MiB in /dev/shm: %w", n>>20, err)
	}
	mem, err = syscall.Mmap(int(f.Fd()), 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		os.Remove(f.Name())
		return "", nil, fmt.Errorf("map %s: %w", f.Name(), err)
	}
	return f.Name(), mem, nil
}

// Open maps the file at path, which must hold exactly n bytes.
func Open(path string, n int) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() != int64(n) {
		return nil, fmt.Errorf("%s holds %d bytes, want %d", path, fi.Size(), n)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", path, err)
	}
	return mem, nil
}

// Unmap releases a mapping from Create or Open; nil is a no-op.
func Unmap(mem []byte) {
	if mem != nil {
		syscall.Munmap(mem)
	}
}

// Free is how many bytes a new job can reserve in /dev/shm: the file
// system's free space plus what the stale files of gone gotrain processes
// hold, which the launcher removes before its workers start.
func Free() (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(shmDir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", shmDir, err)
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	stale, _ := staleFiles("") // unreadable: count no stale file
	for _, s := range stale {
		free += s.bytes
	}
	return free, nil
}

// RemoveStale removes the files in /dev/shm that gotrain processes of this
// user created and that outlived their creator (killed before every peer
// mapped them): files whose creating process, in this PID namespace, is
// gone or a zombie. runID "" means the files of every job; otherwise only
// those of the job it names. A file of a live process, of another user, of
// another PID namespace or not named by gotrain is never touched. It
// returns how many files it removed and the bytes they held; the error
// reports a directory or a file it could not remove.
func RemoveStale(runID string) (files int, bytes int64, err error) {
	stale, err := staleFiles(runID)
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	for _, s := range stale {
		switch err := os.Remove(s.path); {
		case err == nil:
			files++
			bytes += s.bytes
		case !errors.Is(err, fs.ErrNotExist): // ErrNotExist: another run removed it first
			errs = append(errs, err)
		}
	}
	return files, bytes, errors.Join(errs...)
}

// staleFile is a file RemoveStale removes and the bytes it holds.
type staleFile struct {
	path  string
	bytes int64
}

// staleFiles lists the stale files of the job runID names ("" for all).
func staleFiles(runID string) ([]staleFile, error) {
	entries, err := os.ReadDir(shmDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	job := ""
	if runID != "" {
		job = jobTag(runID)
	}
	uid, ns := uint32(os.Geteuid()), pidNS()
	var stale []staleFile
	for _, e := range entries {
		o, ok := parseName(e.Name())
		if !ok || !e.Type().IsRegular() || job != "" && o.job != job || o.ns != ns {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue // removed since ReadDir
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || st.Uid != uid || !processGone(o.pid) {
			continue
		}
		stale = append(stale, staleFile{filepath.Join(shmDir, e.Name()), int64(st.Blocks) * 512})
	}
	return stale, nil
}

// processGone reports whether process pid no longer runs: signal 0 finds
// no such process, or it is a zombie (which maps no memory; in a container
// whose init does not reap orphans, a killed worker may stay one).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return errors.Is(err, fs.ErrNotExist)
	}
	// "pid (comm) state ...": comm may hold any byte, so parse from the
	// last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return false
	}
	f := strings.Fields(string(stat[i+1:]))
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
}

// pidNS is the inode of this process's PID namespace, 0 if unknown.
var pidNS = sync.OnceValue(func() uint64 {
	s, err := os.Readlink("/proc/self/ns/pid") // "pid:[4026531836]"
	if err != nil {
		return 0
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "pid:["), "]")
	v, _ := strconv.ParseUint(s, 10, 64)
	return v
})
