package cpu

import (
	"runtime"
	"testing"
)

func TestSpare(t *testing.T) {
	cpus := runtime.NumCPU()
	for _, tc := range []struct {
		ranks, threads int
		want           bool
	}{
		{1, cpus, true},      // a lone process
		{0, 1, true},         // no launcher: one process
		{cpus, 1, false},     // one rank per CPU
		{2 * cpus, 1, false}, // more ranks than CPUs
		{2, cpus, false},
	} {
		if got := Spare(tc.ranks, tc.threads); got != tc.want {
			t.Errorf("Spare(%d, %d) on %d CPUs = %v, want %v", tc.ranks, tc.threads, cpus, got, tc.want)
		}
	}
	if cpus > 2 && !Spare(2, 1) {
		t.Errorf("Spare(2, 1) on %d CPUs = false, want true", cpus)
	}
}
