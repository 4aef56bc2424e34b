package launch

import (
	"context"
	"time"
)

// Defaults of the wait before a restart (Config.RestartBackoff and
// Config.MaxRestartBackoff): 1 s before the first, doubling for each
// next, 30 s at most, so a worker that fails at once does not use up
// --max-restarts before whatever made it fail (a port, a file, a peer)
// can change.
const (
	DefaultRestartBackoff    = time.Second
	DefaultMaxRestartBackoff = 30 * time.Second
)

// RestartDelay is the wait before restart number n (1 for the first):
// base·2^(n-1), at most limit; 0 for a base of 0 or less.
func RestartDelay(base, limit time.Duration, n int) time.Duration {
	if base <= 0 || n < 1 {
		return 0
	}
	d := base
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// sleepCtx waits d, or until ctx ends: it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
