package launch

import "testing"

// BeforeStart makes f run before each worker starts, until t ends.
func BeforeStart(t testing.TB, f func(localRank int)) {
	old := beforeStart
	beforeStart = f
	t.Cleanup(func() { beforeStart = old })
}
