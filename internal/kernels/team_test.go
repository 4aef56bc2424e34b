package kernels

import (
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// checkRegions runs regions Parallel calls of each size in sizes and
// checks that every index ran exactly once per call.
func checkRegions(t *testing.T, regions int, sizes ...int) {
	t.Helper()
	for _, n := range sizes {
		for r := range regions {
			counts := make([]atomic.Int32, n)
			Parallel(n, func(i int) { counts[i].Add(1) })
			for i := range counts {
				if c := counts[i].Load(); c != 1 {
					t.Fatalf("n=%d region %d: f(%d) ran %d times", n, r, i, c)
				}
			}
		}
	}
}

func TestParallelRunsEachIndexOnce(t *testing.T) {
	checkRegions(t, 200, 0, 1, 2, 3, 8)
}

// TestParallelFirstOnCaller checks that f(0) runs on the calling
// goroutine: a caller's goroutine-bound state (a locked OS thread, say)
// holds for its own share.
func TestParallelFirstOnCaller(t *testing.T) {
	caller := goroutineID()
	for range 100 {
		var first string
		Parallel(3, func(i int) {
			if i == 0 {
				first = goroutineID()
			}
		})
		if first != caller {
			t.Fatalf("f(0) ran on goroutine %s, want the caller's %s", first, caller)
		}
	}
}

// TestParallelFreesMembers checks that every team member is free once a
// region has returned, whether it ran its task or its caller took the
// task back: otherwise the team would shrink region by region to none.
func TestParallelFreesMembers(t *testing.T) {
	for r := range 500 {
		Parallel(2+r%3, func(i int) {
			if i == 0 && r%2 == 0 {
				return // the caller done at once: it often takes its task back
			}
			x := float32(i)
			for range 1000 {
				x = x*0.5 + 1
			}
			_ = x
		})
		if p := team.members.Load(); p != nil {
			for k, w := range *p {
				if w.busy.Load() {
					t.Fatalf("region %d: team member %d still busy after Parallel returned", r, k)
				}
			}
		}
	}
}

// goroutineID returns the running goroutine's number from its stack
// trace's first line ("goroutine 7 [running]:").
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	return strings.Fields(string(buf))[1]
}

// TestParallelWaitsForEveryTask checks that Parallel returns only after
// all its tasks: each task blocks until released, and Parallel must not
// return while any is held.
func TestParallelWaitsForEveryTask(t *testing.T) {
	const n = 4
	release := make(chan struct{})
	var finished atomic.Int32
	returned := make(chan struct{})
	go func() {
		Parallel(n, func(i int) {
			if i != 0 {
				<-release
			}
			finished.Add(1)
		})
		close(returned)
	}()
	for range n - 1 {
		select {
		case <-returned:
			t.Fatal("Parallel returned while tasks were still blocked")
		case release <- struct{}{}:
		}
	}
	<-returned
	if got := finished.Load(); got != n {
		t.Fatalf("%d tasks finished, want %d", got, n)
	}
}

// TestParallelConcurrentAndNested runs regions from several goroutines at
// once, each task opening a region of its own: more tasks than team
// members, so some run on fresh goroutines, and none may be lost or run
// twice.
func TestParallelConcurrentAndNested(t *testing.T) {
	var wg sync.WaitGroup
	var total atomic.Int64
	const callers, regions, outer, inner = 6, 50, 3, 4
	for range callers {
		wg.Go(func() {
			for range regions {
				Parallel(outer, func(int) {
					Parallel(inner, func(int) { total.Add(1) })
				})
			}
		})
	}
	wg.Wait()
	if want := int64(callers * regions * outer * inner); total.Load() != want {
		t.Fatalf("%d tasks ran, want %d", total.Load(), want)
	}
}

// TestParallelAfterSleep takes the sleeping paths: with no polling, every
// member sleeps between regions and every caller sleeps until its tasks
// are done, and each region must still run whole.
func TestParallelAfterSleep(t *testing.T) {
	prev := teamSpin.Swap(0)
	defer teamSpin.Store(prev)
	checkRegions(t, 300, 2, 3)
	// Regions whose helper may outlast the caller's share, so that the
	// caller is often asleep when the helper finishes.
	for range 200 {
		release := make(chan struct{})
		var helperDone atomic.Bool
		Parallel(2, func(i int) {
			if i == 0 {
				go close(release)
				return
			}
			<-release
			helperDone.Store(true)
		})
		if !helperDone.Load() {
			t.Fatal("Parallel returned before its helper finished")
		}
	}
}
