package kernels

import (
	"sync/atomic"
	"time"
)

// GemmCall describes one finished Sgemm, SgemmBias or SgemmSerial call for
// a GemmObserver: its shape, transposes and wall time. Serial marks
// SgemmSerial, whose callers run several at once on their own goroutines
// (their times overlap).
type GemmCall struct {
	TransA, TransB bool
	M, N, K        int
	Serial         bool
	Elapsed        time.Duration
}

// GemmObserver receives every GEMM call while it is installed; it may be
// called from several goroutines at once.
type GemmObserver func(GemmCall)

var gemmObserver atomic.Pointer[GemmObserver]

// SetGemmObserver installs f (nil removes it) and returns the previous
// observer. It serves measurements that attribute a training step's time
// to its GEMM shapes; with none installed a call pays one atomic load.
func SetGemmObserver(f GemmObserver) GemmObserver {
	var p *GemmObserver
	if f != nil {
		p = &f
	}
	if old := gemmObserver.Swap(p); old != nil {
		return *old
	}
	return nil
}

// observeStart returns the start time when an observer is installed.
func observeStart() (time.Time, *GemmObserver) {
	p := gemmObserver.Load()
	if p == nil {
		return time.Time{}, nil
	}
	return time.Now(), p
}

// observeEnd reports a call begun at t0 to the observer p, if any.
func observeEnd(p *GemmObserver, t0 time.Time, serial, transA, transB bool, m, n, k int) {
	if p == nil {
		return
	}
	(*p)(GemmCall{TransA: transA, TransB: transB, M: m, N: n, K: k, Serial: serial, Elapsed: time.Since(t0)})
}
