package fanout

// A fault-tolerant job (Config.FT) goes on without a node whose workers
// all failed or whose agent was lost, as long as the workers of the
// nodes still running are at least MinReplicas: they leave the quorum
// of ddp/ft, and the others train on. Node 0 serves the store, so its
// loss ends the job.

// ftGoesOn reports whether the job goes on without node, which failed
// or was lost, and records it as dropped if so.
func (g *gang) ftGoesOn(node int) bool {
	if !g.ft || g.stopping || g.root >= 0 || node == 0 {
		return false
	}
	live, finished := 0, false
	for i, r := range g.running {
		if r && i != node && i < len(g.workers) {
			live += g.workers[i]
		}
		finished = finished || g.finished[i]
	}
	if live >= max(1, g.minReplicas) || (live == 0 && finished) {
		g.dropped[node] = true
		return true
	}
	return false
}

// ftSurvived reports whether an FT attempt succeeded despite dropped
// nodes: nothing stopped it and some node finished.
func (g *gang) ftSurvived() bool {
	if !g.ft || g.root >= 0 || g.stopping {
		return false
	}
	for _, f := range g.finished {
		if f {
			return true
		}
	}
	return false
}

// logDropped logs each node the job newly went on without.
func (l *launcher) logDropped(g *gang) {
	for i, d := range g.dropped {
		if d && !l.nodes[i].droppedLogged {
			l.nodes[i].droppedLogged = true
			l.log.Warn("fanout: a node's workers left the fault-tolerant job; the other nodes go on",
				"host", l.nodes[i].host, "node", i, "min_replicas", max(1, g.minReplicas))
		}
	}
}
