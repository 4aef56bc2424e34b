package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/gotrain/gotrain/distributed/store"
	"github.com/gotrain/gotrain/distributed/tlsconf"
	"github.com/gotrain/gotrain/internal/logging"
	"github.com/gotrain/gotrain/launch"
	"github.com/gotrain/gotrain/launch/tempdir"
)

// ErrLauncherLost is the cause of an agent's end when its stdin ended or
// no message came within the heartbeat timeout.
var ErrLauncherLost = errors.New("agent: launcher lost")

// fileChunk is the most of a log file sent in one message.
const fileChunk = 256 << 10

// Run serves one node of a job: it reads the Job and then Messages from
// in, writes Messages to out, and runs the node's workers with launch.Run,
// one attempt per Start, each with its restart count. env is the
// environment the workers inherit before the Job's Env (nil means
// os.Environ()).
//
// Run returns when in ends (the launcher closed it, or died), when no
// message came within the heartbeat timeout, or when ctx ends; a running
// attempt's workers are stopped first (SIGTERM, SIGKILL after the stop
// timeout) and the store closed, so nothing is left behind. It returns nil
// after a clean end of in with no attempt running, otherwise an error
// saying why.
func Run(ctx context.Context, in io.Reader, out io.Writer, env []string) error {
	br := bufio.NewReaderSize(in, 64<<10)
	line, err := readLine(br)
	if err != nil {
		return fmt.Errorf("agent: read the job on stdin: %w", err)
	}
	var job Job
	if err := json.Unmarshal(line, &job); err != nil {
		return fmt.Errorf("agent: malformed job on stdin: %w", err)
	}
	if err := job.check(); err != nil {
		return err
	}
	if env == nil {
		env = os.Environ()
	}
	a := &agent{job: job, w: &writer{enc: json.NewEncoder(out)}, env: withTLSHost(append(append([]string(nil), env...), job.Env...), job.Host)}
	a.log = logging.New(a.stream(2), job.LogFormat).With("host", job.Host)
	if job.Dir != "" {
		if err := os.Chdir(job.Dir); err != nil {
			a.log.Warn("agent: the launcher's directory is not here; the workers run in the agent's", "err", err)
		}
	}
	if job.NodeRank == 0 {
		// The store outlives every attempt, so a restart keeps it.
		// The workers reach this store with their TLS settings: it serves
		// with the same ones.
		tc, err := tlsconf.LoadEnv(envLookup(a.env))
		var srv *store.Server
		if err == nil {
			srv, err = store.Listen(net.JoinHostPort("", strconv.Itoa(job.MasterPort)), []byte(job.Token), store.WithTLS(tc))
		}
		if err != nil {
			err = fmt.Errorf("agent on %s: serve the rendezvous store on port %d: %w", job.Host, job.MasterPort, err)
			a.w.send(Message{Type: Exit, Code: 1, Error: err.Error()})
			return err
		}
		defer srv.Close()
		a.addr = srv.Addr().String()
	}
	a.w.send(Message{Type: Ready, Addr: a.addr})
	return a.serve(ctx, br)
}

// readLine reads one line of at most MaxLine bytes, without its newline.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		part, err := br.ReadSlice('\n')
		line = append(line, part...)
		if len(line) > MaxLine {
			return nil, fmt.Errorf("a line longer than %d bytes", MaxLine)
		}
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF && len(line) > 0:
			return line, nil
		case err != nil:
			return nil, err
		}
		return line[:len(line)-1], nil
	}
}

// check refuses a Job that launch.Run could not run, naming the field.
func (j Job) check() error {
	switch {
	case j.Program == "":
		return errors.New("agent: the job names no program")
	case j.Token == "":
		return errors.New("agent: the job has no token")
	case j.NNodes < 1 || j.NodeRank < 0 || j.NodeRank >= j.NNodes:
		return fmt.Errorf("agent: node rank %d out of range for %d nodes", j.NodeRank, j.NNodes)
	case j.NProcPerNode < 1:
		return fmt.Errorf("agent: nproc per node %d, want at least 1", j.NProcPerNode)
	case j.RankOffset < 0 || j.WorldSize < 0:
		// launch.Run checks the rest of the placement.
		return fmt.Errorf("agent: rank offset %d or world size %d is negative", j.RankOffset, j.WorldSize)
	case j.MasterPort < 1 || j.MasterPort > 65535:
		return fmt.Errorf("agent: master port %d out of range", j.MasterPort)
	}
	return nil
}

// agent is one Run call.
type agent struct {
	job  Job
	w    *writer
	env  []string
	log  *slog.Logger
	addr string
}

// result is how one attempt ended.
type result struct {
	restart int
	code    int
	err     error
	failure *launch.Failure
	stopped bool
}

func (a *agent) serve(ctx context.Context, br *bufio.Reader) error {
	msgs := make(chan Message)
	readErr := make(chan error, 1)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			line, err := readLine(br)
			if err != nil {
				readErr <- err
				return
			}
			var m Message
			if err := json.Unmarshal(line, &m); err != nil {
				readErr <- fmt.Errorf("malformed message: %w", err)
				return
			}
			select {
			case msgs <- m:
			case <-done:
				return
			}
		}
	}()
	beat := time.NewTicker(HeartbeatInterval)
	defer beat.Stop()
	timeout := a.job.HeartbeatTimeout
	if timeout <= 0 {
		timeout = DefaultHeartbeatTimeout
	}
	silence := time.NewTimer(timeout)
	defer silence.Stop()

	ctxDone := ctx.Done()
	var (
		cancel  context.CancelCauseFunc
		results = make(chan result, 1)
		lost    error // why the agent ends
	)
	for {
		if lost != nil && cancel == nil {
			return lost
		}
		select {
		case m := <-msgs:
			silence.Reset(timeout)
			switch m.Type {
			case Start:
				if cancel != nil {
					a.log.Error("agent: start while an attempt runs; ignored", "restart", m.Restart)
					continue
				}
				var actx context.Context
				actx, cancel = context.WithCancelCause(ctx)
				go func() { results <- a.attempt(actx, m.Restart) }()
			case Stop:
				if cancel != nil {
					sig := syscall.Signal(m.Signal)
					if sig == 0 {
						sig = syscall.SIGTERM
					}
					cancel(&launch.SignalError{Signal: sig})
				}
			}
		case err := <-readErr:
			readErr = nil
			if errors.Is(err, io.EOF) {
				lost = fmt.Errorf("%w: stdin closed", ErrLauncherLost)
			} else {
				lost = fmt.Errorf("%w: read stdin: %w", ErrLauncherLost, err)
			}
			if cancel == nil {
				if errors.Is(err, io.EOF) {
					return nil // the launcher's clean end
				}
				return lost
			}
			a.log.Warn("agent: the launcher is gone; stopping the workers", "err", err)
			cancel(lost)
		case <-silence.C:
			lost = fmt.Errorf("%w: no message for %v", ErrLauncherLost, timeout)
			a.log.Warn("agent: no heartbeat from the launcher; stopping the workers", "timeout", timeout)
			if cancel != nil {
				cancel(lost)
			}
		case <-ctxDone:
			ctxDone = nil
			if lost == nil {
				lost = context.Cause(ctx)
			}
			if cancel == nil {
				return lost
			}
			// The attempt's context ends with ctx.
		case r := <-results:
			cancel(nil)
			cancel = nil
			m := Message{Type: Exit, Restart: r.restart, Code: r.code, Failure: r.failure, Interrupted: r.stopped}
			if r.err != nil && !errors.Is(r.err, launch.ErrInterrupted) {
				m.Error = r.err.Error()
			}
			a.w.send(m)
		case <-beat.C:
			if err := a.w.send(Message{Type: Heartbeat}); err != nil && lost == nil {
				// Nobody reads our stdout: the launcher is gone.
				lost = fmt.Errorf("%w: write stdout: %w", ErrLauncherLost, err)
				if cancel != nil {
					cancel(lost)
				}
			}
		}
	}
}

// attempt runs attempt restart of the node's workers with launch.Run.
func (a *agent) attempt(ctx context.Context, restart int) result {
	j := a.job
	r := result{restart: restart}
	cfg := launch.Config{
		Program:          j.Program,
		Args:             j.Args,
		NProcPerNode:     j.NProcPerNode,
		NNodes:           j.NNodes,
		NodeRank:         j.NodeRank,
		RankOffset:       j.RankOffset,
		WorldSize:        j.WorldSize,
		MasterAddr:       j.MasterAddr,
		MasterPort:       j.MasterPort,
		MaxRestarts:      j.MaxRestarts,
		RestartCount:     restart,
		NoRestart:        true,
		AgentStore:       true,
		FT:               j.FT,
		ReplicaHost:      j.Host,
		MonitorInterval:  j.MonitorInterval,
		StopTimeout:      j.StopTimeout,
		RunID:            j.RunID,
		Redirects:        j.Redirects,
		Tee:              j.Tee,
		LocalRanksFilter: j.LocalRanksFilter,
		Env:              append(append([]string(nil), a.env...), launch.EnvToken+"="+j.Token),
		Stdout:           a.stream(1),
		Stderr:           a.stream(2),
		Logger:           a.log,
		OnFailure: func(f launch.Failure) {
			f.Host = j.Host
			r.failure = &f
		},
		OnWorkerFailure: func(f launch.Failure) {
			f.Host = j.Host
			a.w.send(Message{Type: Failed, Restart: restart, Failure: &f})
		},
	}
	if j.Events {
		cfg.Events = func(rank int, line []byte) {
			a.w.send(Message{Type: Event, Rank: rank, Data: line})
		}
	}
	if j.LogDir {
		dir, err := a.logDir()
		if err != nil {
			r.code, r.err = 1, err
			return r
		}
		cfg.LogDir = dir
		ls := &logStreamer{a: a, dir: dir, restart: restart, sent: map[string]int64{}}
		stop, stopped := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(stopped)
			ls.run(stop)
		}()
		defer func() {
			close(stop)
			<-stopped
			ls.pass()
			_ = os.RemoveAll(dir)
		}()
	}
	r.code, r.err = launch.Run(ctx, cfg)
	r.stopped = errors.Is(r.err, launch.ErrInterrupted)
	return r
}

// logDir is the agent's private directory for the workers' log files,
// removed after each attempt once its files are sent (and, if the agent
// is killed first, by the next gotrain that makes one: see tempdir).
func (a *agent) logDir() (string, error) {
	dir, err := tempdir.Make("agent")
	if err != nil {
		return "", fmt.Errorf("agent: log directory: %w", err)
	}
	return dir, nil
}

// logInterval is how often the workers' new log lines are sent while
// they run.
const logInterval = 500 * time.Millisecond

// logStreamer sends what the workers add to their log files: while they
// run, and once more when the attempt has ended.
type logStreamer struct {
	a       *agent
	dir     string
	restart int
	sent    map[string]int64 // bytes of each file sent so far
}

// run sends new lines every logInterval until stop is closed.
func (s *logStreamer) run(stop <-chan struct{}) {
	tick := time.NewTicker(logInterval)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			s.pass()
		}
	}
}

// pass sends what every file under the log directory has beyond what was
// sent, with paths without launch's per-run top directory.
func (s *logStreamer) pass() {
	_ = filepath.WalkDir(s.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(s.dir, path)
		// launch's first level is its per-Run directory <run id>_<random>.
		if i := indexSep(rel); i >= 0 {
			rel = rel[i+1:]
		}
		f, err := os.Open(path)
		if err != nil {
			s.a.log.Error("agent: worker log lost", "file", path, "err", err)
			return nil
		}
		defer f.Close()
		off, seen := s.sent[path]
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			return nil
		}
		buf := make([]byte, fileChunk)
		for {
			n, err := io.ReadFull(f, buf)
			if n > 0 || !seen {
				// An empty first message creates the file on the launcher.
				s.a.w.send(Message{Type: File, Restart: s.restart, Path: filepath.ToSlash(rel), Data: buf[:n]})
				seen = true
				s.sent[path] += int64(n)
			}
			if err != nil {
				return nil
			}
		}
	})
}

func indexSep(p string) int {
	for i := 0; i < len(p); i++ {
		if os.IsPathSeparator(p[i]) {
			return i
		}
	}
	return -1
}

// stream is a writer of output messages on stream s. launch.Run's writes
// hold whole lines.
func (a *agent) stream(s int) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		if err := a.w.send(Message{Type: Output, Stream: s, Data: p}); err != nil {
			return 0, err
		}
		return len(p), nil
	})
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// writer serializes the messages to the launcher. After a write error
// every send fails with it: the launcher is gone, and only the heartbeat
// notices.
type writer struct {
	mu  sync.Mutex
	enc *json.Encoder
	err error
}

func (w *writer) send(m Message) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	w.err = w.enc.Encode(m)
	return w.err
}
