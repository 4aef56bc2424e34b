package kernels

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Parallel calls f(0), …, f(n-1) and returns when all have returned:
// f(0) on the calling goroutine, the others on the kernel team, a set of
// goroutines kept between calls that wait for work by polling for a
// short while (a millisecond) before they sleep. A task no team member
// has started by the time the caller is done with f(0) runs on the caller
// after it, so a region never takes much longer than on one thread, even
// when the other CPUs are busy with other work.
//
// A training step runs hundreds of parallel regions, many under a
// millisecond. Handing one to a fresh goroutine costs the time to wake an
// idle CPU, which on a virtual machine was measured at about 100 µs: a
// third of a 300 µs GEMM's share. A team member that is still polling
// starts within a few microseconds. This is the wait policy OpenMP
// runtimes use (GOMP_SPINCOUNT, KMP_BLOCKTIME). Polling yields the
// processor to other goroutines and other processes every few
// microseconds; it only keeps an otherwise idle CPU awake for a
// millisecond after the last region. On a machine whose CPUs other
// processes want, a polling thread only queues behind them (the OS
// scheduler favours threads that slept), so a member that finds its
// polls held up stops polling for a while, and tasks it has not started
// run on their caller. With 2 CPUs and a third busy process, 2-thread
// GEMMs of the MNIST MLP ran 1.05–1.08× as fast as one thread this way
// and 0.85–0.93× with a fresh goroutine per task.
//
// Calls may come from several goroutines at once and may nest; tasks
// must not wait for each other. A panic in a task run by a team member
// crashes the program, as in any goroutine.
func Parallel(n int, f func(i int)) {
	if n <= 1 {
		if n == 1 {
			f(0)
		}
		return
	}
	j := &join{}
	j.pending.Store(int32(n - 1))
	tasks := make([]teamTask, n-1)
	for i := 1; i < n; i++ {
		t := &tasks[i-1]
		*t = teamTask{f: f, i: i, join: j}
		if w := team.claim(n - 1); w != nil {
			t.member = w
			w.give(t)
		}
	}
	f(0)
	for i := range tasks {
		t := &tasks[i]
		if w := t.member; w != nil {
			if !w.task.CompareAndSwap(t, nil) {
				continue // the member took it
			}
			w.busy.Store(false)
		}
		t.run()
	}
	j.wait()
}

// teamSpin is how long, in nanoseconds, a team member polls for work
// after its last task before it sleeps, and how long Parallel polls for
// its tasks to finish before it sleeps. A variable so that tests can take
// the sleeping paths.
var teamSpin atomic.Int64

func init() { teamSpin.Store(int64(time.Millisecond)) }

// teamTask is one call f(i) of a Parallel region.
type teamTask struct {
	f      func(int)
	i      int
	join   *join
	member *teamMember // the member it was given to, or nil
}

func (t *teamTask) run() {
	t.f(t.i)
	t.join.done()
}

// join counts a region's tasks still running; the caller polls it, then
// sleeps on wake once it has polled for teamSpin.
type join struct {
	pending  atomic.Int32
	sleeping atomic.Bool
	wake     chan struct{}
	once     sync.Once
}

func (j *join) ch() chan struct{} {
	j.once.Do(func() { j.wake = make(chan struct{}, 1) })
	return j.wake
}

func (j *join) done() {
	// The waiter sets sleeping before it checks pending a last time, and
	// this side decrements pending before it checks sleeping: with
	// sequentially consistent atomics one of the two sees the other.
	if j.pending.Add(-1) == 0 && j.sleeping.Load() {
		j.ch() <- struct{}{}
	}
}

func (j *join) wait() {
	start := time.Now()
	for spins := 0; j.pending.Load() != 0; spins++ {
		if !yieldTurn(spins) {
			continue
		}
		if time.Since(start) < time.Duration(teamSpin.Load()) {
			continue
		}
		ch := j.ch()
		j.sleeping.Store(true)
		if j.pending.Load() != 0 {
			<-ch
		}
		return
	}
}

// yieldTurn reports whether poll number spins is one of every 64 that
// let this process's other goroutines (runtime.Gosched) and other
// processes' threads (osYield) run first, and then look at the clock.
func yieldTurn(spins int) bool {
	if spins%64 != 63 {
		return false
	}
	runtime.Gosched()
	osYield()
	return true
}

// teamMember is one goroutine of the kernel team.
type teamMember struct {
	busy     atomic.Bool // claimed by a Parallel call until its task is done
	task     atomic.Pointer[teamTask]
	sleeping atomic.Bool
	wake     chan struct{}
}

// give hands t to a member claimed for it.
func (w *teamMember) give(t *teamTask) {
	w.task.Store(t)
	// Dekker's pattern as in join: the member sets sleeping, then checks
	// task; a stale wake-up only makes it look once more.
	if w.sleeping.Load() {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

func (w *teamMember) loop() {
	idleSince := time.Now()
	last := idleSince
	for spins := 0; ; spins++ {
		if t := w.task.Load(); t != nil {
			if !w.task.CompareAndSwap(t, nil) {
				continue // its caller ran it: the member is free again
			}
			t.f(t.i)
			w.busy.Store(false) // free for the next region before it is told this one is done
			t.join.done()
			idleSince, spins = time.Now(), 0
			last = idleSince
			continue
		}
		if !yieldTurn(spins) {
			continue
		}
		now := time.Now()
		if now.Sub(last) > teamPreempted {
			// Other threads want this CPU: polling would only put this
			// one behind them when work comes (the scheduler favours a
			// thread that slept), so sleep, and stop polling for a while.
			teamContendedUntil.Store(now.Add(teamContendedFor).UnixNano())
		}
		last = now
		if now.Sub(idleSince) < time.Duration(teamSpin.Load()) && now.UnixNano() >= teamContendedUntil.Load() {
			continue
		}
		w.sleeping.Store(true)
		if w.task.Load() == nil {
			<-w.wake
		}
		w.sleeping.Store(false)
		idleSince, spins = time.Now(), 0
		last = idleSince
	}
}

// A poll that took longer than teamPreempted means the member's thread
// waited for its CPU behind another thread; members then sleep at once
// when idle for teamContendedFor, waking as fresh goroutines would.
const (
	teamPreempted    = time.Millisecond
	teamContendedFor = 10 * time.Millisecond
)

// teamContendedUntil is when (Unix nanoseconds) members may poll again.
var teamContendedUntil atomic.Int64

// team is the process's kernel team. Members are started on demand, up to
// the largest number of helpers a region has asked for, and never end.
var team teamSet

type teamSet struct {
	mu      sync.Mutex // serialises growth
	members atomic.Pointer[[]*teamMember]
}

// claim returns an idle member marked busy. When all are busy it starts
// one, up to max(want, GOMAXPROCS−1) members, and beyond that returns nil.
func (s *teamSet) claim(want int) *teamMember {
	if w := s.idle(); w != nil {
		return w
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.idle(); w != nil {
		return w
	}
	var cur []*teamMember
	if p := s.members.Load(); p != nil {
		cur = *p
	}
	if len(cur) >= max(want, runtime.GOMAXPROCS(0)-1) {
		return nil
	}
	w := &teamMember{wake: make(chan struct{}, 1)}
	w.busy.Store(true)
	grown := append(cur[:len(cur):len(cur)], w)
	s.members.Store(&grown)
	go w.loop()
	return w
}

func (s *teamSet) idle() *teamMember {
	p := s.members.Load()
	if p == nil {
		return nil
	}
	for _, w := range *p {
		if !w.busy.Load() && w.busy.CompareAndSwap(false, true) {
			return w
		}
	}
	return nil
}
