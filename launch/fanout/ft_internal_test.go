package fanout

import (
	"slices"
	"testing"

	"github.com/gotrain/gotrain/launch"
)

// ftGang is a fault-tolerant gang of three nodes with two workers each.
func ftGang(minReplicas int) *gang {
	g := newGang([]string{"a", "b", "c"})
	g.offsets, g.workers = []int{0, 2, 4}, []int{2, 2, 2}
	g.ft, g.minReplicas = true, minReplicas
	return g
}

func TestGangFTGoesOnWithoutANode(t *testing.T) {
	g := ftGang(4)
	if stop := g.lostNode(2, "host c: the agent sent nothing for 5s", at(0)); stop != nil {
		t.Fatalf("losing c stops %v; the 4 workers of a and b should go on", stop)
	}
	g.exited(0, 0, nil, false, "", at(5))
	g.exited(1, 0, nil, false, "", at(5))
	if ok, code, _ := g.verdict(); !ok || code != 0 || !g.dropped[2] {
		t.Errorf("verdict %v %d, dropped %v; want success without c", ok, code, g.dropped)
	}
}

func TestGangFTStopsBelowMinReplicas(t *testing.T) {
	g := ftGang(4)
	if stop := g.exited(1, 137, &launch.Failure{Rank: 2, Host: "b", ExitCode: 137}, false, "", at(0)); stop != nil {
		t.Fatalf("b's failure stops %v; 4 workers remain", stop)
	}
	// c too: 2 workers remain, fewer than 4.
	if stop := g.exited(2, 137, &launch.Failure{Rank: 4, Host: "c", ExitCode: 137}, false, "", at(1)); !slices.Equal(stop, []int{0}) {
		t.Fatalf("c's failure stops %v, want [0]", stop)
	}
	g.exited(0, 143, nil, true, "", at(2))
	if ok, code, _ := g.verdict(); ok || code != 137 {
		t.Errorf("verdict %v %d, want a failure with c's code 137", ok, code)
	}
}

func TestGangFTNodeZeroIsNeeded(t *testing.T) {
	g := ftGang(1)
	if stop := g.lostNode(0, "host a: connection closed", at(0)); !slices.Equal(stop, []int{1, 2}) {
		t.Fatalf("losing node 0 (the store) stops %v, want [1 2]", stop)
	}
}
