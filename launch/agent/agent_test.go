package agent_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testnet"
	"github.com/gotrain/gotrain/internal/testproc"
	"github.com/gotrain/gotrain/launch/agent"
)

func TestMain(m *testing.M) {
	testproc.Dispatch(testproc.Workers{
		"sleep": func() int {
			_ = os.WriteFile(filepath.Join(os.Getenv("PID_DIR"), strconv.Itoa(os.Getpid())), nil, 0o644)
			fmt.Println("up", os.Getenv("RANK"), os.Getenv("GOTRAIN_RESTART_COUNT"), os.Getenv("GOTRAIN_AGENT_STORE"))
			time.Sleep(time.Minute) // until the agent stops it; the minute ends an orphan
			return 0
		},
		"event": func() int {
			f := os.NewFile(3, "events")
			fmt.Fprintf(f, `{"kind":"step","rank":%s}`+"\n", os.Getenv("RANK"))
			return 0
		},
	})
	os.Exit(m.Run())
}

// session is an agent.Run in this process, spoken to through pipes.
type session struct {
	in   *io.PipeWriter
	msgs chan agent.Message
	done chan error
}

func start(t *testing.T, job agent.Job) *session {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	s := &session{in: inW, msgs: make(chan agent.Message, 100), done: make(chan error, 1)}
	go func() {
		err := agent.Run(context.Background(), inR, outW, nil)
		outW.Close()
		s.done <- err
	}()
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, agent.MaxLine)
		for sc.Scan() {
			var m agent.Message
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Errorf("agent wrote %q: %v", sc.Text(), err)
			}
			if m.Type != agent.Heartbeat {
				s.msgs <- m
			}
		}
		close(s.msgs)
	}()
	b, _ := json.Marshal(job)
	go inW.Write(append(b, '\n'))
	t.Cleanup(func() { inW.Close() })
	return s
}

func (s *session) send(t *testing.T, m agent.Message) {
	b, _ := json.Marshal(m)
	if _, err := s.in.Write(append(b, '\n')); err != nil {
		t.Fatal(err)
	}
}

// await returns the first message of type typ, failing after limit.
func (s *session) await(t *testing.T, typ string, limit time.Duration) agent.Message {
	t.Helper()
	timeout := time.After(limit)
	for {
		select {
		case m, ok := <-s.msgs:
			if !ok {
				t.Fatalf("the agent ended before sending %q", typ)
			}
			if m.Type == typ {
				return m
			}
		case <-timeout:
			t.Fatalf("no %q message within %v", typ, limit)
		}
	}
}

func job(t *testing.T, worker string, env ...string) agent.Job {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return agent.Job{Host: "h0", Program: self, Token: "secret", NNodes: 2, NodeRank: 1, NProcPerNode: 2,
		MasterAddr: "127.0.0.1", MasterPort: testnet.FreePort(t), RunID: "r", StopTimeout: time.Second,
		Env: append([]string{testproc.Env(worker), "GOTRAIN_ALLOW_LOOPBACK=1"}, env...)}
}

// waitGone fails unless every pid recorded in dir ends within limit.
func waitGone(t *testing.T, dir string, want int, limit time.Duration) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	if len(entries) != want {
		t.Fatalf("%d workers recorded, want %d", len(entries), want)
	}
	deadline := time.Now().Add(limit)
	for _, e := range entries {
		pid, _ := strconv.Atoi(e.Name())
		if !testproc.Poll(time.Until(deadline), func() bool { return syscall.Kill(pid, 0) != nil }) {
			t.Fatalf("worker %d still runs after %v", pid, limit)
		}
	}
}

// running starts attempt restart and waits for both workers' first line.
func (s *session) running(t *testing.T, restart int) {
	t.Helper()
	s.await(t, agent.Ready, 5*time.Second)
	s.send(t, agent.Message{Type: agent.Start, Restart: restart})
	var out string
	for strings.Count(out, "up ") < 2 {
		out += string(s.await(t, agent.Output, 10*time.Second).Data)
	}
	for r := 2; r < 4; r++ {
		if want := fmt.Sprintf("[rank%d]: up %d %d 1\n", r, r, restart); !strings.Contains(out, want) {
			t.Errorf("output %q lacks %q", out, want)
		}
	}
}

func TestAgentStopsWorkersOnEOF(t *testing.T) {
	dir := t.TempDir()
	s := start(t, job(t, "sleep", "PID_DIR="+dir))
	s.running(t, 2)
	s.in.Close()
	select {
	case err := <-s.done:
		if !errors.Is(err, agent.ErrLauncherLost) {
			t.Errorf("Run = %v, want ErrLauncherLost", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the agent still runs 5 s after its stdin closed")
	}
	waitGone(t, dir, 2, time.Second)
}

func TestAgentStopsWorkersWithoutHeartbeat(t *testing.T) {
	dir := t.TempDir()
	j := job(t, "sleep", "PID_DIR="+dir)
	j.HeartbeatTimeout = 700 * time.Millisecond
	s := start(t, j)
	s.running(t, 0)
	select {
	case err := <-s.done:
		if !errors.Is(err, agent.ErrLauncherLost) || !strings.Contains(err.Error(), "no message for 700ms") {
			t.Errorf("Run = %v, want ErrLauncherLost for the silence", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the agent still runs 5 s after the launcher fell silent")
	}
	waitGone(t, dir, 2, time.Second)
}

func TestAgentStopReportsInterrupted(t *testing.T) {
	dir := t.TempDir()
	s := start(t, job(t, "sleep", "PID_DIR="+dir))
	s.running(t, 1)
	s.send(t, agent.Message{Type: agent.Stop, Signal: int(syscall.SIGINT)})
	m := s.await(t, agent.Exit, 5*time.Second)
	if m.Restart != 1 || !m.Interrupted || m.Code != 128+int(syscall.SIGINT) || m.Failure != nil {
		t.Errorf("exit message %+v, want restart 1 interrupted with code 130", m)
	}
	waitGone(t, dir, 2, time.Second)
	s.in.Close()
	if err := <-s.done; err != nil {
		t.Errorf("Run after a clean end = %v", err)
	}
}

func TestAgentEvents(t *testing.T) {
	j := job(t, "event")
	j.Events = true
	s := start(t, j)
	s.await(t, agent.Ready, 5*time.Second)
	s.send(t, agent.Message{Type: agent.Start})
	got := map[int]string{}
	for len(got) < 2 {
		m := s.await(t, agent.Event, 5*time.Second)
		got[m.Rank] = string(m.Data)
	}
	for r := 2; r < 4; r++ {
		if want := fmt.Sprintf(`{"kind":"step","rank":%d}`, r); got[r] != want {
			t.Errorf("rank %d event %q, want %q", r, got[r], want)
		}
	}
	if m := s.await(t, agent.Exit, 5*time.Second); m.Code != 0 || m.Error != "" {
		t.Errorf("exit %+v, want success", m)
	}
}

func TestAgentNodeZeroServesStore(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	j := job(t, "sleep")
	j.NodeRank, j.MasterPort = 0, ln.Addr().(*net.TCPAddr).Port
	s := start(t, j)
	m := s.await(t, agent.Exit, 5*time.Second)
	if m.Code != 1 || !strings.Contains(m.Error, fmt.Sprintf("serve the rendezvous store on port %d", j.MasterPort)) {
		t.Errorf("exit %+v, want the store's port named", m)
	}
	if err := <-s.done; err == nil {
		t.Error("Run = nil with the store port taken")
	}
}

func TestAgentRefusesBadJob(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"not json\n", "malformed job"},
		{`{"program":"x","token":"t","nnodes":1,"node_rank":1,"nproc_per_node":1,"master_port":1}` + "\n", "node rank 1 out of range"},
		{`{"program":"x","nnodes":1,"nproc_per_node":1,"master_port":1}` + "\n", "no token"},
		{"", "read the job"},
	} {
		err := agent.Run(context.Background(), strings.NewReader(tc.in), io.Discard, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("job %q: Run = %v, want %q", tc.in, err, tc.want)
		}
	}
}
