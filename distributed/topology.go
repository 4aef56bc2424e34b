package distributed

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/gotrain/gotrain/distributed/store"
)

// topology is how a group's ranks sit on nodes (machines): the ranks
// that share a node key. Hierarchical collectives run their intra-node
// phases among a node's ranks and their inter-node phase among one
// leader per node.
type topology struct {
	nodes [][]int // the ranks of each node, increasing; nodes ordered by their lowest rank
	node  []int   // the node of each rank: an index into nodes
}

// multiNode reports whether the group spans several nodes and some node
// runs more than one rank: the layouts in which a hierarchical collective
// moves less over the network than a flat one.
func (t *topology) multiNode() bool {
	if len(t.nodes) < 2 {
		return false
	}
	for _, n := range t.nodes {
		if len(n) > 1 {
			return true
		}
	}
	return false
}

// leaders returns the lowest rank of each node, in node order.
func (t *topology) leaders() []int {
	l := make([]int, len(t.nodes))
	for i, n := range t.nodes {
		l[i] = n[0]
	}
	return l
}

// order returns the ranks node by node (the order of the staging buffers
// of hierarchical allgather and reduce-scatter) and each rank's position
// in it.
func (t *topology) order() (order, pos []int) {
	pos = make([]int, len(t.node))
	for _, n := range t.nodes {
		for _, r := range n {
			pos[r] = len(order)
			order = append(order, r)
		}
	}
	return order, pos
}

// newTopology groups ranks by key: keys[r] is rank r's node key.
func newTopology(keys []string) *topology {
	t := &topology{node: make([]int, len(keys))}
	index := map[string]int{}
	for r, k := range keys {
		i, ok := index[k]
		if !ok {
			i = len(t.nodes)
			index[k] = i
			t.nodes = append(t.nodes, nil)
		}
		t.nodes[i] = append(t.nodes[i], r)
		t.node[r] = i
	}
	return t
}

// String describes t for logs: "2 nodes: [0 1] [2 3]".
func (t *topology) String() string {
	var b strings.Builder
	if len(t.nodes) == 1 {
		b.WriteString("1 node:")
	} else {
		fmt.Fprintf(&b, "%d nodes:", len(t.nodes))
	}
	for _, n := range t.nodes {
		fmt.Fprintf(&b, " %v", n)
	}
	return b.String()
}

// hostNodeKey names the node this process runs on: its host name, the
// kernel's boot id, and its network namespace. Ranks in different network
// namespaces of one machine (containers, or the namespaces of
// testing/clustertest) reach each other over a network, not loopback, so
// they are different nodes; where /proc is missing the host name alone
// decides.
func hostNodeKey() string {
	host, _ := os.Hostname()
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	netns, _ := os.Readlink("/proc/self/ns/net")
	return host + "|" + strings.TrimSpace(string(boot)) + "|" + netns
}

// exchangeTopology publishes this rank's node key in the group's store
// and reads every rank's, so that every rank builds the same topology.
func exchangeTopology(ctx context.Context, st store.Store, rank, size int, key string) (*topology, error) {
	if size == 1 {
		return newTopology([]string{key}), nil
	}
	if err := st.Set(ctx, "node/"+strconv.Itoa(rank), []byte(key)); err != nil {
		return nil, fmt.Errorf("publish this rank's node: %w", err)
	}
	keys := make([]string, size)
	for r := range keys {
		v, err := st.Get(ctx, "node/"+strconv.Itoa(r))
		if err != nil {
			return nil, fmt.Errorf("read the node of rank %d: %w", r, err)
		}
		keys[r] = string(v)
	}
	return newTopology(keys), nil
}

// Nodes returns the ranks of the group on each node (machine), node by
// node in order of their lowest rank, each node's ranks in increasing
// order. Ranks share a node when they share a host name, boot and
// network namespace.
func (g *Group) Nodes() [][]int {
	out := make([][]int, len(g.topo.nodes))
	for i, n := range g.topo.nodes {
		out[i] = slices.Clone(n)
	}
	return out
}
