package fanout

import (
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/gotrain/gotrain/launch"
)

// gang is the launcher's decisions for one attempt, as a state machine fed
// with what the nodes report and answering with the nodes to stop. It does
// no I/O, so tests drive it without processes.
type gang struct {
	hosts    []string
	running  []bool
	codes    []int
	finished []bool // exited 0

	root      int // the node whose failure ended the attempt, or -1
	rootEarly *launch.Failure
	rootFinal *launch.Failure
	rootErr   string // why the root node failed when no worker did (agent lost, could not start)
	lost      bool   // a node's agent is gone or cannot run the workers: no restart helps
	exitWait  bool   // --exit-wait ran out
	waiting   []string
	stopping  bool
	signal    syscall.Signal // forwarded on an interrupt, or 0
}

func newGang(hosts []string) *gang {
	g := &gang{hosts: hosts, running: make([]bool, len(hosts)), codes: make([]int, len(hosts)),
		finished: make([]bool, len(hosts)), root: -1}
	for i := range g.running {
		g.running[i] = true
	}
	return g
}

// stopAll marks the attempt as stopping and returns the nodes to stop:
// every node still running except skip (-1 for none).
func (g *gang) stopAll(skip int) []int {
	g.stopping = true
	var nodes []int
	for i, r := range g.running {
		if r && i != skip {
			nodes = append(nodes, i)
		}
	}
	return nodes
}

// failed: a worker on node failed (the agent's early report). The first
// one is the root cause; the other nodes are stopped.
func (g *gang) failed(node int, f *launch.Failure) []int {
	if g.root >= 0 || g.stopping {
		return nil
	}
	g.root, g.rootEarly = node, f
	return g.stopAll(node)
}

// exited: node's attempt ended with code; f is its root cause if a
// worker failed, errText why it could not run.
func (g *gang) exited(node, code int, f *launch.Failure, interrupted bool, errText string) []int {
	if !g.running[node] {
		return nil
	}
	g.running[node] = false
	g.codes[node] = code
	if errText != "" {
		g.lost = true // the same job would fail the same way again
	}
	if node == g.root {
		g.rootFinal = f
		if errText != "" && g.rootErr == "" {
			g.rootErr = errText
		}
	}
	switch {
	case code == 0 && errText == "":
		g.finished[node] = true
		return nil
	case interrupted && g.stopping:
		return nil // we stopped it
	case g.root < 0 && !g.stopping:
		g.root, g.rootFinal, g.rootErr = node, f, errText
		return g.stopAll(node)
	}
	return nil
}

// lostNode: node's agent is gone (its connection ended or went silent).
func (g *gang) lostNode(node int, why string) []int {
	if !g.running[node] {
		return nil
	}
	g.running[node] = false
	g.codes[node] = 1
	g.lost = true
	if g.root < 0 && !g.stopping {
		g.root, g.rootErr = node, why
		return g.stopAll(node)
	}
	return nil
}

// interrupt: the launcher got sig; every node is stopped with it.
func (g *gang) interrupt(sig syscall.Signal) []int {
	if g.signal != 0 {
		return nil
	}
	g.signal = sig
	return g.stopAll(-1)
}

// needExitWait reports whether some node finished while others still run
// and nothing is stopping them yet: the --exit-wait clock runs.
func (g *gang) needExitWait() bool {
	if g.stopping || g.done() {
		return false
	}
	for _, f := range g.finished {
		if f {
			return true
		}
	}
	return false
}

// exitWaitOver: the nodes still running after --exit-wait are stopped and
// the job fails.
func (g *gang) exitWaitOver(wait time.Duration) []int {
	if g.stopping {
		return nil
	}
	g.exitWait = true
	for i, r := range g.running {
		if r {
			g.waiting = append(g.waiting, fmt.Sprintf("node %d (%s)", i, g.hosts[i]))
		}
	}
	g.rootErr = fmt.Sprintf("other nodes finished, but %s still ran after --exit-wait %v", strings.Join(g.waiting, ", "), wait)
	return g.stopAll(-1)
}

// done reports whether every node's attempt has ended.
func (g *gang) done() bool {
	for _, r := range g.running {
		if r {
			return false
		}
	}
	return true
}

// verdict is how the ended attempt ends: succeeded, or the exit code and
// whether a restart may follow.
func (g *gang) verdict() (ok bool, code int, restartable bool) {
	switch {
	case g.signal != 0:
		return false, 128 + int(g.signal), false
	case g.exitWait:
		return false, 1, false
	case g.root < 0:
		return true, 0, false
	}
	code = g.codes[g.root]
	if f := g.failure(); f != nil && f.ExitCode != 0 {
		code = f.ExitCode
	}
	if code == 0 {
		code = 1
	}
	return false, code, !g.lost
}

// failure is the root cause's report: the final one (with all its stderr)
// if the node sent it, else the early one.
func (g *gang) failure() *launch.Failure {
	if g.rootFinal != nil {
		return g.rootFinal
	}
	return g.rootEarly
}
