package launch_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gotrain/gotrain/internal/testproc"
	"github.com/gotrain/gotrain/launch"
)

// The test binary doubles as the launched worker: as testproc worker
// "worker" it runs testWorker instead of the tests, its behaviour chosen
// per rank; as "launcher" it is a launcher of two such workers (a nested
// launch.Run), so a test can kill the launcher itself.
const (
	envAction = "LAUNCH_TEST_ACTION"     // default action; LAUNCH_TEST_ACTION_<rank> overrides it
	envDir    = "LAUNCH_TEST_DIR"        // where workers leave pid and marker files
	envPeers  = "LAUNCH_TEST_WAIT_PEERS" // killself waits for this many pid files first
)

var workers = testproc.Workers{
	"worker": testWorker,
	"launcher": func() int {
		code, err := launch.Run(context.Background(), launch.Config{
			Program: os.Args[0], Env: testproc.Environ("worker"), NProcPerNode: 2, Standalone: true,
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
		return code
	},
}

func TestMain(m *testing.M) {
	testproc.Dispatch(workers)
	goleak.VerifyTestMain(m)
}

// contractVars are the variables the env action prints.
var contractVars = []string{
	"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
	"ROLE_NAME", "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
	"TORCHELASTIC_RESTART_COUNT", "GOTRAIN_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
	"TORCHELASTIC_RUN_ID", "GOTRAIN_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE", "GOTRAIN_TOKEN",
	"OMP_NUM_THREADS", "GOTRAIN_NUM_THREADS",
}

// testWorker acts out the action named for this worker's rank:
//
//	env          print the contract variables as KEY=VALUE lines
//	exit:N       exit with status N at once
//	sleep        leave a pid file, then sleep until a signal, reporting it
//	sleep-ignore leave a pid file and sleep, ignoring SIGTERM and SIGINT
//	killself     wait for LAUNCH_TEST_WAIT_PEERS pid files, then SIGKILL itself
//	spawn        start a sleeping child (pid file child-<rank>), then sleep
//	spawn-exit   start a sleeping child, then exit 0
//	escape       start a sleeping child in a new session, holding stdout, then exit 0
//	dieonce      exit 3 the first time (marker file), else print the restart count
//	restart      print the restart count, exit 0
//	lines        write interleaving-prone lines, a long line and an unterminated one
//	both         write "out r=<rank>" to stdout and "err r=<rank>" to stderr, exit 0
//	noisy:N      write stderr lines e1 to e15, then exit with status N
//	panic        write a line to stderr, then panic (Go's crash report)
func testWorker() int {
	rank := os.Getenv("RANK")
	action := os.Getenv(envAction + "_" + rank)
	if action == "" {
		action = os.Getenv(envAction)
	}
	dir := os.Getenv(envDir)
	pidFile := filepath.Join(dir, "pid-"+rank)
	switch {
	case action == "env":
		for _, k := range contractVars {
			v, ok := os.LookupEnv(k)
			if !ok {
				v = "<unset>"
			}
			fmt.Printf("%s=%s\n", k, v)
		}
		return 0
	case strings.HasPrefix(action, "exit:"):
		code, _ := strconv.Atoi(strings.TrimPrefix(action, "exit:"))
		fmt.Fprintf(os.Stderr, "exiting with %d\n", code)
		return code
	case action == "sleep":
		return sleepUntilSignal(rank, pidFile)
	case action == "sleep-ignore":
		signal.Ignore(syscall.SIGTERM, syscall.SIGINT)
		writePid(pidFile)
		time.Sleep(time.Minute) // until SIGKILLed; the minute ends an orphan
		return 0
	case action == "killself":
		want, _ := strconv.Atoi(os.Getenv(envPeers))
		awaitFiles(filepath.Join(dir, "pid-*[0-9]"), want)
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		panic("alive after SIGKILL")
	case action == "spawn", action == "spawn-exit", action == "escape":
		os.MkdirAll(filepath.Join(dir, "child"), 0o755)
		child := exec.Command(os.Args[0])
		if action == "escape" {
			// A child that leaves the worker's process group but keeps its
			// stdout: the launcher cannot stop it and must not wait for it.
			child.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
			child.Stdout = os.Stdout
		}
		child.Env = append(os.Environ(), envAction+"_"+rank+"=sleep")
		child.Env = append(child.Env, envDir+"="+filepath.Join(dir, "child"))
		if err := child.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "spawn:", err)
			return 2
		}
		// The child's pid file appears in dir/child; wait for it so the
		// test sees both.
		awaitFiles(filepath.Join(dir, "child", "pid-"+rank), 1)
		if action == "spawn-exit" || action == "escape" {
			fmt.Println("parent done")
			return 0
		}
		return sleepUntilSignal(rank, pidFile)
	case action == "dieonce":
		marker := filepath.Join(dir, "marker-"+rank)
		if _, err := os.Stat(marker); err != nil {
			os.WriteFile(marker, nil, 0o644)
			fmt.Println("dying once")
			return 3
		}
		fmt.Println("restart=" + os.Getenv("GOTRAIN_RESTART_COUNT"))
		return 0
	case action == "restart":
		fmt.Println("restart=" + os.Getenv("GOTRAIN_RESTART_COUNT"))
		return 0
	case action == "lines":
		writeLines(rank)
		return 0
	case action == "both":
		fmt.Println("out r=" + rank)
		fmt.Fprintln(os.Stderr, "err r="+rank)
		return 0
	case action == "panic":
		fmt.Fprintln(os.Stderr, "before the crash")
		panic("worker gave up")
	case strings.HasPrefix(action, "noisy:"):
		code, _ := strconv.Atoi(strings.TrimPrefix(action, "noisy:"))
		for i := 1; i <= 15; i++ {
			fmt.Fprintf(os.Stderr, "e%d\n", i)
		}
		return code
	}
	fmt.Fprintf(os.Stderr, "unknown test action %q\n", action)
	return 99
}

// awaitFiles waits until n files match pattern. The test's own bound ends
// a worker that waits forever.
func awaitFiles(pattern string, n int) {
	testproc.Poll(time.Minute, func() bool {
		m, _ := filepath.Glob(pattern)
		return len(m) >= n
	})
}

func writePid(path string) {
	// Written to a temporary name and renamed so readers never see it empty.
	tmp := path + ".tmp"
	os.WriteFile(tmp, []byte(strconv.Itoa(os.Getpid())), 0o644)
	os.Rename(tmp, path)
}

func sleepUntilSignal(rank, pidFile string) int {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	writePid(pidFile)
	select {
	case s := <-ch:
		fmt.Printf("rank %s got %v\n", rank, s)
		return 128 + int(s.(syscall.Signal))
	case <-time.After(time.Minute):
		return 0
	}
}

// Line shapes written by the lines action and checked by TestOutputPrefixes.
const (
	linesPerWorker = 300
	longLineLen    = 200_000
)

// writeLines writes each line in three write calls, so that a launcher that
// copied bytes instead of whole lines would interleave workers mid-line.
func writeLines(rank string) {
	for i := range linesPerWorker {
		payload := strings.Repeat(string(rune('a'+i%26)), 1+(i*37)%900)
		head := fmt.Sprintf("r=%s i=%d n=%d ", rank, i, len(payload))
		os.Stdout.WriteString(head)
		os.Stdout.WriteString(payload)
		os.Stdout.WriteString("\n")
		if i%50 == 0 {
			os.Stderr.WriteString("err r=" + rank + " ")
			os.Stderr.WriteString("i=" + strconv.Itoa(i) + "\n")
		}
	}
	os.Stdout.WriteString("long r=" + rank + " " + strings.Repeat("y", longLineLen) + "\n")
	os.Stdout.WriteString("tail-" + rank) // no newline
}
