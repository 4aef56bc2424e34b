package launch

import (
	"slices"
	"strings"
	"testing"
)

// TestTail: the tail keeps the last tailLines lines written in any pieces,
// cuts long lines, keeps the last redraw of a '\r' line and includes an
// unterminated last line.
func TestTail(t *testing.T) {
	var tl tail
	for i := range 25 {
		line := strings.Repeat("x", i) + "\n"
		for _, c := range []byte(line) { // a byte at a time
			tl.Write([]byte{c})
		}
	}
	got := tl.lines()
	if len(got) != tailLines || got[0] != strings.Repeat("x", 15) || got[tailLines-1] != strings.Repeat("x", 24) {
		t.Fatalf("lines after 25: %q", got)
	}
	tl.Write([]byte("10%\r50%\r100%\r\n" + strings.Repeat("y", 2*tailLineLen) + "\nno newline"))
	got = tl.lines()
	want := []string{"100%", strings.Repeat("y", tailLineLen) + "…", "no newline"}
	if len(got) != tailLines || !slices.Equal(got[tailLines-3:], want) {
		t.Fatalf("lines: %q; want it to end with %q", got, want)
	}
}

// TestRoute: torchrun's rules for where each stream goes.
func TestRoute(t *testing.T) {
	c := Config{NProcPerNode: 3, LogDir: "d",
		Redirects:        Streams{All: StdErr, ByLocalRank: map[int]Std{2: StdNone}},
		Tee:              Streams{ByLocalRank: map[int]Std{1: StdAll}},
		LocalRanksFilter: []int{0, 1}}
	for lr, want := range []streamRoute{
		{console: [2]bool{true, false}, file: [2]bool{false, true}}, // stderr redirected
		{console: [2]bool{true, true}, file: [2]bool{true, true}},   // tee wins
		{console: [2]bool{false, false}, file: [2]bool{false, false}},
	} {
		if got := c.route(lr); got != want {
			t.Errorf("route(%d) = %+v, want %+v", lr, got, want)
		}
	}
	if got := (Config{NProcPerNode: 1}).route(0); got != (streamRoute{console: [2]bool{true, true}}) {
		t.Errorf("no log dir: route %+v, want console only", got)
	}
}
