package kernels

import (
	"runtime"
	"testing"
)

func TestThreadsFromEnv(t *testing.T) {
	t.Setenv(EnvNumThreads, "3")
	if got, warning := threadsFromEnv(); got != 3 || warning != nil {
		t.Fatalf("%s=3: got %d threads", EnvNumThreads, got)
	}
	for _, bad := range []string{"", "0", "-2", "two"} {
		t.Setenv(EnvNumThreads, bad)
		got, warning := threadsFromEnv()
		if want := runtime.GOMAXPROCS(0); got != want {
			t.Fatalf("%s=%q: got %d threads, want GOMAXPROCS %d", EnvNumThreads, bad, got, want)
		}
		if (warning != nil) != (bad != "") {
			t.Fatalf("%s=%q: warning %v", EnvNumThreads, bad, warning)
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
