package kernels

import (
	"sync"
	"testing"
)

// TestGemmObserver checks that an installed observer sees every entry
// point's calls with their shapes, transposes and kind, and that none are
// seen once it is removed.
func TestGemmObserver(t *testing.T) {
	var mu sync.Mutex
	var calls []GemmCall
	prev := SetGemmObserver(func(c GemmCall) {
		mu.Lock()
		calls = append(calls, c)
		mu.Unlock()
	})
	x := make([]float32, 64)
	Sgemm(false, true, 2, 3, 4, 1, x, 4, x, 4, 0, x, 3)
	SgemmBias(true, false, 3, 2, 4, 1, x, 3, x, 2, x[:2], x, 2)
	SgemmSerial(false, false, 4, 2, 3, 1, x, 3, x, 2, 0, x, 2)
	if got := SetGemmObserver(prev); got == nil {
		t.Fatal("SetGemmObserver did not return the installed observer")
	}
	Sgemm(false, false, 1, 1, 1, 1, x, 1, x, 1, 0, x, 1)
	want := []GemmCall{
		{TransB: true, M: 2, N: 3, K: 4},
		{TransA: true, M: 3, N: 2, K: 4},
		{M: 4, N: 2, K: 3, Serial: true},
	}
	if len(calls) != len(want) {
		t.Fatalf("observed %d calls, want %d: %+v", len(calls), len(want), calls)
	}
	for i, w := range want {
		c := calls[i]
		if c.Elapsed < 0 {
			t.Errorf("call %d: negative time %v", i, c.Elapsed)
		}
		c.Elapsed = 0
		if c != w {
			t.Errorf("call %d = %+v, want %+v", i, c, w)
		}
	}
}
