//go:build linux

package shm

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// envHold makes the test binary a process that creates a file of the kind
// it names, prints its path and blocks until killed ("exit": exit at once).
const envHold = "SHM_TEST_HOLD"

func TestMain(m *testing.M) {
	switch kind := os.Getenv(envHold); kind {
	case "":
		os.Exit(m.Run())
	case "exit":
		os.Exit(0)
	default:
		path, _, err := Create(kind, 8192)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println(path)
		time.Sleep(time.Minute) // a holder, until the test kills it; the minute ends an orphan
		os.Exit(1)
	}
}

// testJob returns a run id of its own for t and makes it this process's.
// Every file a test makes is in this job, so the test never touches
// another's; files it leaves are removed when it ends.
func testJob(t *testing.T) string {
	t.Helper()
	job := fmt.Sprintf("shmtest%d_%d_%s", os.Getpid(), time.Now().UnixNano(), strings.ReplaceAll(t.Name(), "/", "_"))
	if len(job) > maxJobLen {
		job = job[:maxJobLen]
	}
	t.Setenv(EnvRunID, job)
	t.Cleanup(func() {
		left, _ := filepath.Glob(FilePattern(job))
		for _, p := range left {
			os.Remove(p)
		}
	})
	return job
}

func skipWithoutShm(t *testing.T) {
	t.Helper()
	if fi, err := os.Stat(shmDir); err != nil || !fi.IsDir() {
		t.Skip("no /dev/shm")
	}
}

// deadPid returns the pid of a process that has exited and been reaped.
func deadPid(t *testing.T) int {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envHold+"=exit")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if !processGone(cmd.Process.Pid) {
		t.Skipf("pid %d was reused at once", cmd.Process.Pid)
	}
	return cmd.Process.Pid
}

func TestNames(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "none"},
		{"none", "none"},
		{"1b4e28ba-2fa1-41d2-883f-0016d3cca427", "1b4e28ba_2fa1_41d2_883f_0016d3cca427"},
		{"a/b c-d.e_f", "a_b_c_d.e_f"},
		{strings.Repeat("x", 50), strings.Repeat("x", maxJobLen)},
	} {
		if got := jobTag(tc.in); got != tc.want {
			t.Errorf("jobTag(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	t.Setenv(EnvRunID, "job-7")
	name := strings.Replace(namePattern("ring"), "*", "12345", 1)
	o, ok := parseName(name)
	if want := (owner{job: "job_7", pid: os.Getpid(), ns: pidNS()}); !ok || o != want {
		t.Errorf("parseName(%q) = %+v, %v; want %+v", name, o, ok, want)
	}
	if m, _ := filepath.Match(FilePattern("job-7"), filepath.Join(shmDir, name)); !m {
		t.Errorf("%s does not match FilePattern %s", name, FilePattern("job-7"))
	}
	for _, bad := range []string{"gotrain-arena-123", "gotrain-123", "gotrain-j-12.3-ring", "gotrain-j-x.3-ring-1",
		"gotrain-j-12-ring-1", "gotrain-j-0.3-ring-1", "gotrain-j-12.3-ring-1-2", "other-j-12.3-ring-1"} {
		if o, ok := parseName(bad); ok {
			t.Errorf("parseName(%q) = %+v, want no gotrain name", bad, o)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("namePattern accepted a kind with a '-'")
		}
	}()
	namePattern("a-b")
}

// TestRemoveStaleSparesLive: the files of a live process, of another PID
// namespace, another job, another user or with another name stay; only
// this user's files of a gone process go.
func TestRemoveStaleSparesLive(t *testing.T) {
	skipWithoutShm(t)
	job := testJob(t)
	live, mem, err := Create("test", 8192)
	if err != nil {
		t.Fatal(err)
	}
	defer Unmap(mem)
	dead := deadPid(t)
	tag, ns := jobTag(job), pidNS()
	file := func(name string) string {
		p := filepath.Join(shmDir, name)
		if err := os.WriteFile(p, make([]byte, 4096), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	stale := file(fmt.Sprintf("gotrain-%s-%d.%d-ring-1", tag, dead, ns))
	otherNS := file(fmt.Sprintf("gotrain-%s-%d.%d-ring-2", tag, dead, ns+1))
	otherJob := file(fmt.Sprintf("gotrain-%sx-%d.%d-ring-3", tag, dead, ns))
	odd := file(fmt.Sprintf("gotrain-%s-%d-ring-4", tag, dead))
	keep := []string{live, otherNS, otherJob, odd}
	if os.Geteuid() == 0 {
		other := file(fmt.Sprintf("gotrain-%s-%d.%d-ring-5", tag, dead, ns))
		if err := os.Chown(other, 54321, 54321); err != nil {
			t.Fatal(err)
		}
		keep = append(keep, other)
	}
	n, bytes, err := RemoveStale(job)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 || bytes != 4096 {
		t.Errorf("RemoveStale removed %d files of %d bytes, want 1 of 4096", n, bytes)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the file of gone process %d is still there (%v)", dead, err)
	}
	for _, p := range keep {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}
	for _, p := range keep[1:] {
		os.Remove(p)
	}
	os.Remove(live)
}

// TestKilledCreatorsFileRemoved: a process SIGKILLed between creating a
// file and unlinking it leaves the file; RemoveStale removes it.
func TestKilledCreatorsFileRemoved(t *testing.T) {
	skipWithoutShm(t)
	job := testJob(t)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envHold+"=arena") // with testJob's GOTRAIN_RUN_ID
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	path := strings.TrimSpace(line)
	if err != nil || !strings.HasPrefix(path, shmDir+"/") {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the holder printed %q (%v)", line, err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the holder's file: %v", err)
	}
	n, _, err := RemoveStale(job)
	if err != nil || n != 0 {
		t.Fatalf("RemoveStale with the creator alive removed %d files (%v)", n, err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the live holder's file was removed: %v", err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	// Another test process's first Create may have removed it already.
	if left, _ := filepath.Glob(FilePattern(job)); len(left) > 1 || len(left) == 1 && left[0] != path {
		t.Fatalf("files of the job: %v, want at most %s", left, path)
	}
	if _, _, err := RemoveStale(job); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(FilePattern(job)); len(left) != 0 {
		t.Fatalf("after RemoveStale the killed job still has %v", left)
	}
}

// TestNeedIsWhatCreateReserves: Need matches the pages that the arena and
// ring files of a group actually reserve.
func TestNeedIsWhatCreateReserves(t *testing.T) {
	skipWithoutShm(t)
	testJob(t)
	reserved := func(path string) int64 {
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		return int64(st.Blocks) * 512
	}
	for _, n := range []int{2, 3} {
		path, _, mem, err := CreateArena(n)
		if err != nil {
			t.Fatal(err)
		}
		got := reserved(path)
		os.Remove(path)
		Unmap(mem)
		for range n * (n - 1) / 2 {
			path, mem, err := Create("ring", ringSize)
			if err != nil {
				t.Fatal(err)
			}
			got += reserved(path)
			os.Remove(path)
			Unmap(mem)
		}
		if want := Need(n, n); got != want {
			t.Errorf("%d ranks reserve %d bytes, Need says %d", n, got, want)
		}
	}
	if got, want := Need(2, 4), pageRound(ringSize); got != want {
		t.Errorf("Need(2, 4) = %d, want one ring and no arena: %d", got, want)
	}
	if Need(1, 1) != 0 || Need(1, 8) != 0 || Need(0, 8) != 0 {
		t.Errorf("a lone local rank needs no shared memory: %d, %d, %d", Need(1, 1), Need(1, 8), Need(0, 8))
	}
	if got := Need(16, 16); got < 2e9 || got > 2.1e9 {
		t.Errorf("Need(16, 16) = %d, want about 2 GB", got)
	}
	if got := Need(ArenaMaxRanks+1, ArenaMaxRanks+1); got != int64((ArenaMaxRanks+1)*ArenaMaxRanks/2)*pageRound(ringSize) {
		t.Errorf("Need(%d) = %d counts an arena beyond ArenaMaxRanks", ArenaMaxRanks+1, got)
	}
}

func TestFreeCountsStaleFiles(t *testing.T) {
	skipWithoutShm(t)
	job := testJob(t)
	dead := deadPid(t)
	// Free space and other stale files change as parallel tests run, so
	// compare against the file system's own count, taken around Free.
	p := filepath.Join(shmDir, fmt.Sprintf("gotrain-%s-%d.%d-ring-1", jobTag(job), dead, pidNS()))
	if err := os.WriteFile(p, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	stale, err := staleFiles(job)
	if err != nil || len(stale) != 1 || stale[0].bytes != 1<<20 {
		t.Fatalf("staleFiles = %+v, %v; want %s of 1 MiB", stale, err, p)
	}
	statfs := func() int64 {
		var st syscall.Statfs_t
		if err := syscall.Statfs(shmDir, &st); err != nil {
			t.Fatal(err)
		}
		return int64(st.Bavail) * int64(st.Bsize)
	}
	before := statfs()
	free, err := Free()
	if err != nil {
		t.Fatal(err)
	}
	if fs := min(before, statfs()); free < fs+1<<20 {
		t.Errorf("Free() = %d, less than the free space %d plus the stale file's 1 MiB", free, fs)
	}

}
