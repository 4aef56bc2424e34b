package cpu

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"
)

// RoundTrip is how long two threads pinned to CPUs A and B take to pass a
// cache line to and fro, per round trip: the cost of sharing data between
// those CPUs. CPUs that share a cache (an AMD CCD, an Intel socket) answer
// in tens of nanoseconds; CPUs that do not, or virtual CPUs the host has
// placed on different dies, take several times as long, and threads of
// one process that share a training step's data between them slow down
// with it. Processes that share nothing (DDP workers) do not.
type RoundTrip struct {
	A, B   int
	Rounds int
	Time   time.Duration // per round trip
}

// answerTimeout bounds the wait for one answer, so that a CPU that never
// runs the other thread (taken offline, or held by another task at a
// real-time priority) fails the measurement instead of hanging it.
const answerTimeout = 2 * time.Second

// MeasureRoundTrip measures the round trip between CPUs a and b over
// rounds passes, pinning one thread to each (Linux only). It fails, naming
// the CPU, when a or b is not one this process may run on, and when ctx
// ends first.
func MeasureRoundTrip(ctx context.Context, a, b, rounds int) (RoundTrip, error) {
	if a == b {
		return RoundTrip{}, fmt.Errorf("round trip from cpu %d to itself: want two different CPUs", a)
	}
	if rounds < 1 {
		return RoundTrip{}, fmt.Errorf("round trip: %d rounds: want at least 1", rounds)
	}
	if err := ctx.Err(); err != nil {
		return RoundTrip{}, fmt.Errorf("round trip: %w", err)
	}
	allowed, err := Allowed()
	if err != nil {
		return RoundTrip{}, err
	}
	for _, c := range []int{a, b} {
		if !slices.Contains(allowed, c) {
			return RoundTrip{}, fmt.Errorf("cpu %d is not one this process may run on (allowed: %s)", c, FormatList(allowed))
		}
	}
	var line pingLine
	line.v.Store(-2) // each side adds 1 once pinned: 0 starts the first round
	var elapsed time.Duration
	errs := make(chan error, 2)
	// A writes odd values and B even ones, each after the other's last;
	// A times the rounds on its own thread, from B's first answer being
	// awaited to its last arriving, so that pinning is not counted.
	await := func(cpu, other int, want int64) error {
		if err := line.await(ctx, want); err != nil {
			return fmt.Errorf("cpu %d waiting for cpu %d: %w", cpu, other, err)
		}
		return nil
	}
	go func() {
		errs <- onCPU(a, func() error {
			line.v.Add(1)
			if err := await(a, b, 0); err != nil {
				return err
			}
			t0 := time.Now()
			for i := int64(0); i < int64(rounds); i++ {
				line.v.Store(2*i + 1)
				if err := await(a, b, 2*i+2); err != nil {
					return err
				}
			}
			elapsed = time.Since(t0)
			return nil
		})
	}()
	go func() {
		errs <- onCPU(b, func() error {
			line.v.Add(1)
			for i := int64(0); i < int64(rounds); i++ {
				if err := await(b, a, 2*i+1); err != nil {
					return err
				}
				line.v.Store(2*i + 2)
			}
			return nil
		})
	}()
	var first error
	for range 2 {
		if err := <-errs; err != nil && first == nil {
			first = err
			line.abort.Store(true) // let the other side stop waiting
		}
	}
	if first != nil {
		return RoundTrip{}, first
	}
	return RoundTrip{A: a, B: b, Rounds: rounds, Time: elapsed / time.Duration(rounds)}, nil
}

// pingLine is the cache line the two threads pass, padded so that nothing
// else shares it.
type pingLine struct {
	_     [64]byte
	v     atomic.Int64
	abort atomic.Bool
	_     [64]byte
}

// await spins until the line holds want, checking the clock and ctx every
// few thousand polls.
func (l *pingLine) await(ctx context.Context, want int64) error {
	var since time.Time
	for spins := 0; l.v.Load() != want; spins++ {
		if spins&4095 != 4095 {
			continue
		}
		if l.abort.Load() {
			return errors.New("the other side failed")
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		now := time.Now()
		if since.IsZero() {
			since = now
		} else if now.Sub(since) > answerTimeout {
			return fmt.Errorf("no answer within %v", answerTimeout)
		}
	}
	return nil
}

// FormatList writes CPUs as Linux's cpulist format does: "0-3,8".
func FormatList(cpus []int) string {
	s := ""
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if s != "" {
			s += ","
		}
		if j > i {
			s += fmt.Sprintf("%d-%d", cpus[i], cpus[j])
		} else {
			s += fmt.Sprint(cpus[i])
		}
		i = j + 1
	}
	return s
}
