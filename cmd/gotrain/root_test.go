package main

import (
	"slices"
	"testing"
)

// TestRootCmdFresh: newRootCmd builds every command, and each tree it
// builds has its own flag values: a command line parsed by one leaves
// the next at its defaults.
func TestRootCmdFresh(t *testing.T) {
	first := newRootCmd()
	var names []string
	for _, c := range first.Commands() {
		names = append(names, c.Name())
	}
	for _, want := range []string{"agent", "bench", "env", "plot", "preflight-node", "run", "store", "trace", "train"} {
		if !slices.Contains(names, want) {
			t.Errorf("gotrain has the commands %v, want %s among them", names, want)
		}
	}
	run, _, err := first.Find([]string{"run"})
	if err != nil {
		t.Fatal(err)
	}
	if err := run.ParseFlags([]string{"--nnodes", "2", "--rdzv-endpoint", "h:1", "--hosts", "a,b"}); err != nil {
		t.Fatal(err)
	}
	again, _, err := newRootCmd().Find([]string{"run"})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"nnodes", "rdzv-endpoint", "hosts"} {
		if fl := again.Flags().Lookup(name); fl.Changed || fl.Value.String() != fl.DefValue {
			t.Errorf("a new tree's --%s is %q (changed %v), want its default %q", name, fl.Value, fl.Changed, fl.DefValue)
		}
	}
}
