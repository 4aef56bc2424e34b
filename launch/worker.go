package launch

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/gotrain/gotrain/event"
	"github.com/gotrain/gotrain/internal/logging"
)

// worker is one running worker process. The goroutine running the attempt
// owns it; only the pump goroutines and the wait goroutine touch their own
// parts (readEnds, cmd.Wait).
type worker struct {
	localRank, rank int
	cmd             *exec.Cmd
	pumps           sync.WaitGroup
	readEnds        []*os.File // the launcher's ends of the stdout, stderr (and events) pipes
	logFiles        []*os.File
	stderrTail      tail // the last lines of stderr, for the failure report

	exited    bool // the wait goroutine reported the exit
	code      int  // exit code, 128+signal if killed by a signal
	groupGone bool // exited and its process group seen empty: never signal it again
	reaper    *reaper
}

// workerSpec is what startWorker needs to start one worker.
type workerSpec struct {
	path      string // resolved program path
	argv0     string // the program as the user named it
	args      []string
	env       []string
	localRank int
	rank      int
	stdout    io.Writer // console, already serialized
	stderr    io.Writer
	events    func(rank int, line []byte) // nil: no events pipe
	logDir    string                      // "" for no log files
	route     streamRoute
	reaper    *reaper // told of the worker's process group; may be nil
}

// startWorker starts one worker in its own process group, with its output
// pumped to the console (and log files). On error nothing is left running.
func startWorker(s workerSpec) (_ *worker, err error) {
	w := &worker{localRank: s.localRank, rank: s.rank, reaper: s.reaper}
	var childEnds []*os.File
	defer func() {
		// The child holds its own copies of the write ends; ours must go so
		// the pumps see EOF when the worker (and its children) exit.
		for _, f := range childEnds {
			f.Close()
		}
		if err != nil {
			w.closeFiles()
		}
	}()

	var logs [2]io.Writer
	if s.logDir != "" && (s.route.file[0] || s.route.file[1]) {
		dir := filepath.Join(s.logDir, strconv.Itoa(s.localRank))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("launch: log directory for rank %d: %w", s.rank, err)
		}
		for i, name := range []string{"stdout.log", "stderr.log"} {
			if !s.route.file[i] {
				continue
			}
			f, err := os.Create(filepath.Join(dir, name))
			if err != nil {
				return nil, fmt.Errorf("launch: log file for rank %d: %w", s.rank, err)
			}
			w.logFiles = append(w.logFiles, f)
			logs[i] = f
		}
	}
	for range 2 {
		r, wr, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("launch: output pipe for rank %d: %w", s.rank, err)
		}
		w.readEnds = append(w.readEnds, r)
		childEnds = append(childEnds, wr)
	}

	var eventsLog *os.File // nil: no log directory
	cmd := exec.Command(s.path, s.args...)
	cmd.Args[0] = s.argv0
	cmd.Env = withoutEventsFD(s.env)
	cmd.Stdout = childEnds[0]
	cmd.Stderr = childEnds[1]
	if s.events != nil {
		r, wr, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("launch: events pipe for rank %d: %w", s.rank, err)
		}
		w.readEnds = append(w.readEnds, r)
		childEnds = append(childEnds, wr)
		cmd.ExtraFiles = []*os.File{wr} // descriptor 3 in the worker
		cmd.Env = append(cmd.Env, event.EnvFD+"=3")
		if eventsLog, err = createEventsLog(s.logDir, s.localRank); err != nil {
			return nil, fmt.Errorf("launch: events log file for rank %d: %w", s.rank, err)
		}
		if eventsLog != nil {
			w.logFiles = append(w.logFiles, eventsLog)
		}
	}
	cmd.SysProcAttr = workerSysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("launch: start rank %d (%s): %w", s.rank, s.argv0, err)
	}
	w.cmd = cmd
	s.reaper.watch(w.pid())

	prefix := "[rank" + strconv.Itoa(s.rank) + "]: "
	consoles := s.route.consoles(s.stdout, s.stderr)
	// stderr passes the crash filter (crash.go): its log file gets the
	// raw bytes, the failure report's tail what the console shows.
	runID, _ := lookupEnv(s.env, EnvRunID)
	in := [2]io.Reader{w.readEnds[0], newCrashFilter(w.readEnds[1], logs[1], crashReportFile(s.logDir, s.localRank, s.rank, runID, w.pid))}
	logs[1] = &w.stderrTail
	jsonLogs := workerLogFormat(s.env) == logging.JSON
	for i, r := range in {
		if jsonLogs {
			w.pumps.Go(func() { pumpJSONLines(r, s.rank, [2]string{"stdout", "stderr"}[i], consoles[i], logs[i]) })
			continue
		}
		w.pumps.Go(func() { pumpLines(r, prefix, consoles[i], logs[i]) })
	}
	if s.events != nil {
		w.pumps.Go(func() { pumpEvents(w.readEnds[2], s.rank, s.events, eventsLog) })
	}
	return w, nil
}

// pid is the worker's process id, also its process group id.
func (w *worker) pid() int { return w.cmd.Process.Pid }

// signalGroup sends sig to every process in the worker's process group, so
// the worker's own children get it too. A group already gone is no error.
func (w *worker) signalGroup(sig syscall.Signal) {
	if w.groupGone {
		return
	}
	_ = syscall.Kill(-w.pid(), sig) // ESRCH: nothing left to signal
}

// groupAlive reports whether any process remains in the worker's group,
// including the worker itself before it is reaped. Once the worker is
// reaped and its group empty, the group id is never used again: the pid
// may be reused by an unrelated process group.
func (w *worker) groupAlive() bool {
	if w.groupGone {
		return false
	}
	err := syscall.Kill(-w.pid(), 0)
	// EPERM: a member we may not signal (a setuid child) still exists.
	alive := err == nil || errors.Is(err, syscall.EPERM)
	if alive {
		if live, ok := groupHasLiveProcess(w.pid()); ok {
			alive = live // zombies are dead already: no need to wait for them
		}
	}
	if !alive && w.exited {
		w.groupGone = true
		w.reaper.forget(w.pid())
	}
	return alive
}

// finishOutput waits until deadline for the worker's output to drain, then
// closes the pipes: a grandchild that escaped the process group (setsid)
// may hold them open forever, and must not hold up the launcher.
func (w *worker) finishOutput(deadline time.Time) {
	done := w.awaitOutput(deadline)
	for _, f := range w.readEnds {
		f.Close() // unblocks the pumps' reads with os.ErrClosed
	}
	<-done
	w.closeFiles()
}

// awaitOutput waits until the worker's output has drained or deadline
// passes, and returns a channel closed once it has drained. An exited
// worker's last lines may still be in its pipes: a report built before
// they are read misses them (the peer line that names whom it blames).
func (w *worker) awaitOutput(deadline time.Time) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		w.pumps.Wait()
		close(done)
	}()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
	return done
}

// closeFiles closes the launcher's pipe ends and the log files; the pumps
// must be done.
func (w *worker) closeFiles() {
	for _, f := range w.readEnds {
		f.Close()
	}
	for _, f := range w.logFiles {
		f.Close()
	}
}

// exitCode is the worker's exit code as a shell reports it: the status it
// exited with, or 128+n after death by signal n.
func exitCode(state *os.ProcessState) int {
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return state.ExitCode()
}
