package launch

import (
	"testing"
	"time"
)

// StopTimeout is one stop's StopTimeout, which passes when the test calls
// Pass.
type StopTimeout struct {
	D    time.Duration
	Pass func()
}

// StopTimeouts makes the StopTimeout of every stop from now until t ends
// pass when the test says so: once a stop has signalled the workers and
// waits for them, the channel receives its StopTimeout.
func StopTimeouts(t testing.TB) <-chan StopTimeout {
	timeouts := make(chan StopTimeout, 16)
	old := stopTimer
	stopTimer = func(d time.Duration) (<-chan time.Time, func() bool) {
		c := make(chan time.Time, 1)
		timeouts <- StopTimeout{D: d, Pass: func() { c <- time.Now() }}
		return c, func() bool { return true }
	}
	t.Cleanup(func() { stopTimer = old })
	return timeouts
}
