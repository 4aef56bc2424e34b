package fanout

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"syscall"
	"time"

	"github.com/gotrain/gotrain/launch/agent"
	"github.com/gotrain/gotrain/launch/ssh"
)

// nodeMsg is a message from node's agent, or err when its connection
// ended.
type nodeMsg struct {
	node int
	agent.Message
	err error
}

// node is one host's agent, reached through its ssh process.
type node struct {
	ssh    ssh.Client // to end a shared connection to host
	index  int
	host   string
	pgid   int
	in     chan []byte
	closed bool          // in is closed
	done   chan struct{} // closed when the ssh process has been waited for
	werr   error
	tail   tailBuffer // ssh's stderr, for the failure report
	ready  bool
	gone   bool
	seen   time.Time // the last message from the agent
	// droppedLogged: a fault-tolerant job went on without the node, and said so.
	droppedLogged bool
}

// startNode starts ssh running argv on host and sends it job on stdin.
// Messages from the agent go to msgs; ssh's own stderr lines go there too,
// as output naming the host.
func startNode(c ssh.Client, index int, host string, argv []string, job agent.Job, msgs chan<- nodeMsg, stderr io.Writer) (*node, error) {
	n := &node{ssh: c, index: index, host: host, in: make(chan []byte, 64), done: make(chan struct{}), seen: time.Now()}
	// Not tied to a context: the launcher ends it by closing its stdin,
	// so the agent can stop its workers and report.
	cmd := c.Command(context.Background(), host, argv...)
	setProcAttr(cmd)
	cmd.Stderr = io.MultiWriter(&n.tail, &lineSender{node: index, prefix: "host " + host + ": ", msgs: msgs})
	cmd.WaitDelay = closeWait
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("fanout: host %s: %w", host, err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("fanout: host %s: %w", host, err)
	}
	line, err := json.Marshal(job)
	if err != nil {
		return nil, fmt.Errorf("fanout: encode the job for %s: %w", host, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%w: host %s: run ssh: %w", ErrNodeLost, host, err)
	}
	n.pgid = cmd.Process.Pid
	go func() {
		defer stdin.Close()
		if _, err := stdin.Write(append(line, '\n')); err != nil {
			return
		}
		for b := range n.in {
			if _, err := stdin.Write(b); err != nil {
				for range n.in { // drain until closed
				}
				return
			}
		}
	}()
	go func() {
		br := bufio.NewReaderSize(stdout, 64<<10)
		var rerr error
		for {
			line, err := readLine(br)
			if len(bytes.TrimSpace(line)) > 0 {
				var m agent.Message
				if jerr := json.Unmarshal(line, &m); jerr != nil {
					// Not the protocol: something printed on the agent's
					// stdout (a shell's motd, a wrong binary).
					msgs <- nodeMsg{node: index, Message: agent.Message{Type: agent.Output, Stream: 2, Data: []byte("host " + host + ": " + string(line) + "\n")}}
				} else {
					msgs <- nodeMsg{node: index, Message: m}
				}
			}
			if err != nil {
				rerr = err
				break
			}
		}
		if rerr != io.EOF {
			// Unread output would hold the agent up: end it.
			_ = syscall.Kill(-n.pgid, syscall.SIGKILL)
		}
		n.werr = cmd.Wait()
		close(n.done)
		msgs <- nodeMsg{node: index, err: rerr}
	}()
	return n, nil
}

// send queues m for the agent; it never blocks. Only the launcher's
// goroutine calls send, closeInput and abandon.
//
// It never blocks (a node whose ssh stopped
// reading is found lost by its silence).
func (n *node) send(m agent.Message) {
	b, err := json.Marshal(m)
	if err != nil {
		return
	}
	if n.closed {
		return
	}
	select {
	case n.in <- append(b, '\n'):
	default:
	}
}

// closeInput closes the agent's stdin, which ends it.
func (n *node) closeInput() {
	if !n.closed {
		n.closed = true
		close(n.in)
	}
}

// abandon gives up on the node: its ssh is killed, which ends the agent
// (and with it, its workers) on the host.
func (n *node) abandon() {
	n.gone = true
	n.closeInput()
	_ = syscall.Kill(-n.pgid, syscall.SIGKILL)
	go n.ssh.Disconnect(n.host) // a shared connection would outlive ssh
}

// wait waits for the ssh process until deadline, then kills it.
func (n *node) wait(deadline time.Time) {
	select {
	case <-n.done:
		return
	case <-time.After(time.Until(deadline)):
	}
	_ = syscall.Kill(-n.pgid, syscall.SIGKILL)
	n.ssh.Disconnect(n.host)
	<-n.done
}

// failure says why the node's connection ended: ssh's classified failure
// once the process has exited.
func (n *node) failure(err error) error {
	n.gone = true
	select {
	case <-n.done:
	case <-time.After(2 * time.Second):
		return fmt.Errorf("host %s: the agent's connection ended: %v", n.host, err)
	}
	return exitErr(n.host, n.werr, &n.tail)
}

// lineSender sends each whole line written to it as stderr output.
type lineSender struct {
	node    int
	prefix  string
	msgs    chan<- nodeMsg
	partial []byte
}

func (s *lineSender) Write(p []byte) (int, error) {
	s.partial = append(s.partial, p...)
	for {
		i := bytes.IndexByte(s.partial, '\n')
		if i < 0 {
			break
		}
		line := append([]byte(s.prefix), s.partial[:i+1]...)
		s.partial = s.partial[i+1:]
		s.msgs <- nodeMsg{node: s.node, Message: agent.Message{Type: agent.Output, Stream: 2, Data: line}}
	}
	return len(p), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// readLine reads one line without its newline; a line longer than
// agent.MaxLine is an error (a bounded allocation, whatever the other
// end sends).
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		part, err := br.ReadSlice('\n')
		if len(line)+len(part) > agent.MaxLine {
			return nil, fmt.Errorf("a line longer than %d bytes", agent.MaxLine)
		}
		line = append(line, part...)
		if err == bufio.ErrBufferFull {
			continue
		}
		return bytes.TrimSuffix(line, []byte("\n")), err
	}
}
