package fanout

import (
	"fmt"
	"slices"
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
	offsets  []int // each node's first global rank, if known
	workers  []int // each node's workers, if known
	running  []bool
	codes    []int
	finished []bool // exited 0

	root     int    // the node whose failure stopped the attempt, or -1
	rootErr  string // why the root node failed when no worker did (agent lost, could not start)
	lost     bool   // a node's agent is gone or cannot run the workers: no restart helps
	exitWait bool   // --exit-wait ran out
	waiting  []string
	stopping bool
	signal   syscall.Signal // forwarded on an interrupt, or 0

	// What each node reported, for the root cause (see failure): its
	// failure (the final report, or the early one until it comes), when
	// the launcher first heard of it, and why a node was lost.
	reports  []*launch.Failure
	heard    []time.Time
	lostWhy  []string
	lostAt   []time.Time
	graceDue bool // a secondary failure came first: give the primary one time

	ft          bool   // a fault-tolerant job: see ft.go
	minReplicas int    // with ft, the fewest workers the job goes on with
	dropped     []bool // with ft, the nodes the job went on without
}

func newGang(hosts []string) *gang {
	g := &gang{hosts: hosts, running: make([]bool, len(hosts)), codes: make([]int, len(hosts)),
		finished: make([]bool, len(hosts)), root: -1,
		reports: make([]*launch.Failure, len(hosts)), heard: make([]time.Time, len(hosts)),
		lostWhy: make([]string, len(hosts)), lostAt: make([]time.Time, len(hosts)),
		dropped: make([]bool, len(hosts))}
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

// failed: a worker on node failed (the agent's early report), heard at
// at. The first primary failure stops the other nodes; a secondary one
// (the fallout of another rank's failure) only asks for a grace period
// (graceDue), in which the primary one may still arrive.
func (g *gang) failed(node int, f *launch.Failure, at time.Time) []int {
	g.note(node, f, at, false)
	if g.root >= 0 || g.stopping {
		return nil
	}
	if f != nil && f.Secondary {
		g.graceDue = true
		return nil
	}
	g.root = node
	return g.stopAll(node)
}

// note records node's report f, heard at at; final replaces an early one.
func (g *gang) note(node int, f *launch.Failure, at time.Time, final bool) {
	if f == nil {
		return
	}
	if g.heard[node].IsZero() {
		g.heard[node] = at
	}
	if final || g.reports[node] == nil {
		g.reports[node] = f
	}
}

// graceOver: the grace period after a secondary failure ended without a
// primary one; every node is stopped.
func (g *gang) graceOver() []int {
	g.graceDue = false
	if g.stopping {
		return nil
	}
	return g.stopAll(-1)
}

// exited: node's attempt ended with code; f is its root cause if a
// worker failed, errText why it could not run.
func (g *gang) exited(node, code int, f *launch.Failure, interrupted bool, errText string, at time.Time) []int {
	if !g.running[node] {
		return nil
	}
	g.note(node, f, at, true)
	g.running[node] = false
	g.codes[node] = code
	if errText != "" {
		g.lost = true // the same job would fail the same way again
	}
	if node == g.root && errText != "" && g.rootErr == "" {
		g.rootErr = errText
	}
	switch {
	case code == 0 && errText == "":
		g.finished[node] = true
		return nil
	case interrupted && g.stopping:
		return nil // we stopped it
	case g.ftGoesOn(node):
		return nil
	case g.root < 0 && !g.stopping && f != nil && f.Secondary && errText == "":
		g.graceDue = true
		return nil
	case g.root < 0 && !g.stopping:
		g.root, g.rootErr = node, errText
		return g.stopAll(node)
	}
	return nil
}

// lostNode: node's agent is gone (its connection ended or went silent).
func (g *gang) lostNode(node int, why string, at time.Time) []int {
	if !g.running[node] {
		return nil
	}
	g.lostWhy[node], g.lostAt[node] = why, at
	g.running[node] = false
	g.codes[node] = 1
	g.lost = true
	if g.ftGoesOn(node) {
		return nil
	}
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
	case g.ftSurvived():
		return true, 0, false
	case g.root < 0 && !g.stopping && !g.anyFailure():
		return true, 0, false
	}
	if f := g.failure(); f != nil && f.ExitCode != 0 {
		code = f.ExitCode
	} else if g.root >= 0 {
		code = g.codes[g.root]
	}
	if code == 0 {
		code = 1
	}
	return false, code, !g.lost
}

// anyFailure reports whether a node reported a failed worker or was lost.
func (g *gang) anyFailure() bool {
	for i := range g.hosts {
		if g.reports[i] != nil || g.lostWhy[i] != "" {
			return true
		}
	}
	return false
}

// failure is the root cause of the failed attempt, over every node (see
// launch.RootCause): the earliest primary failure, by when the launcher
// heard of it, where a node that was lost (unreachable, silent, gone) is
// one; else the rank the others blamed, on whichever node it ran; nil if
// no worker failed and no node was lost (a node could not run its
// workers, or --exit-wait ran out: rootErr says why).
func (g *gang) failure() *launch.Failure {
	var fs []launch.Failure
	for i := range g.hosts {
		if g.lostWhy[i] != "" {
			fs = append(fs, launch.Failure{Rank: -1, ExitCode: 1, Time: g.lostAt[i],
				Reason: fmt.Sprintf("node %d (host %s%s) unreachable: %s", i, g.hosts[i], g.rankRange(i), g.lostWhy[i])})
		}
		if f := g.reports[i]; f != nil {
			c := *f
			c.Time = g.heard[i] // one clock for every node
			fs = append(fs, c)
		}
	}
	root, ok := launch.RootCause(fs)
	if !ok {
		return nil
	}
	if root.Rank < 0 {
		// A lost node: the ranks that failed because of one of its ranks.
		node := -1
		for i := range g.hosts {
			if g.lostWhy[i] != "" && g.lostAt[i].Equal(root.Time) {
				node = i
			}
		}
		for _, f := range fs {
			switch {
			case node < 0:
			case f.Blames && g.nodeOf(f.BlameRank) == node:
				root.BlamedBy = append(root.BlamedBy, f.Rank)
			case f.Silent && f.PID == 0 && g.nodeOf(f.Rank) == node:
				// A node's inference that one of the lost node's ranks
				// went silent: its ranks failed because of the loss.
				root.BlamedBy = append(root.BlamedBy, f.BlamedBy...)
			}
		}
		slices.Sort(root.BlamedBy)
	}
	if root.Silent && root.Host == "" {
		if n := g.nodeOf(root.Rank); n >= 0 {
			root.Host = g.hosts[n]
		}
	}
	return &root
}

// nodeOf is the node that runs global rank r, or -1 if unknown.
func (g *gang) nodeOf(r int) int {
	for i := len(g.offsets) - 1; i >= 0; i-- {
		if r >= g.offsets[i] {
			return i
		}
	}
	return -1
}

// rankRange is ", ranks 2-3" for node i, or "" if unknown.
func (g *gang) rankRange(i int) string {
	if i >= len(g.offsets) || i >= len(g.workers) {
		return ""
	}
	if g.workers[i] == 1 {
		return fmt.Sprintf(", rank %d", g.offsets[i])
	}
	return fmt.Sprintf(", ranks %d-%d", g.offsets[i], g.offsets[i]+g.workers[i]-1)
}
