package kernels

import (
	"runtime"
	"testing"
)

func TestThreadsFromEnv(t *testing.T) {
	t.Setenv(EnvNumThreads, "3")
	if got := threadsFromEnv(); got != 3 {
		t.Fatalf("%s=3: got %d threads", EnvNumThreads, got)
	}
	for _, bad := range []string{"", "0", "-2", "two"} {
		t.Setenv(EnvNumThreads, bad)
		if got, want := threadsFromEnv(), runtime.GOMAXPROCS(0); got != want {
			t.Fatalf("%s=%q: got %d threads, want GOMAXPROCS %d", EnvNumThreads, bad, got, want)
		}
	}
}

func TestSetNumThreads(t *testing.T) {
	prev := SetNumThreads(0)
	defer SetNumThreads(prev)
	if got := NumThreads(); got != 1 {
		t.Fatalf("SetNumThreads(0): NumThreads() = %d, want 1", got)
	}
	if old := SetNumThreads(4); old != 1 || NumThreads() != 4 {
		t.Fatalf("SetNumThreads(4) returned %d, NumThreads() = %d", old, NumThreads())
	}
}
