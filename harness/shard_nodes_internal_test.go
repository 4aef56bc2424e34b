package harness

import (
	"slices"
	"testing"
)

// TestNodesOf: ranks grouped by their GROUP_RANK give the layout
// distributed.Group.Nodes gives for hosts: nodes ordered by their lowest
// rank, whatever the node ranks' values and however the ranks interleave.
func TestNodesOf(t *testing.T) {
	for _, tc := range []struct {
		keys []int64
		want [][]int
		str  string
	}{
		{[]int64{0, 0, 1, 1}, [][]int{{0, 1}, {2, 3}}, "[0 1] [2 3]"},
		{[]int64{1, 0, 1, 0}, [][]int{{0, 2}, {1, 3}}, "[0 2] [1 3]"},
		{[]int64{3, 3, 3}, [][]int{{0, 1, 2}}, "[0 1 2]"},
		{[]int64{0, 1, 2}, [][]int{{0}, {1}, {2}}, "[0] [1] [2]"},
	} {
		got := nodesOf(tc.keys)
		if !slices.EqualFunc(got, tc.want, slices.Equal) {
			t.Errorf("nodesOf(%v) = %v, want %v", tc.keys, got, tc.want)
		}
		if s := nodesString(got); s != tc.str {
			t.Errorf("nodesString(%v) = %q, want %q", got, s, tc.str)
		}
	}
}
