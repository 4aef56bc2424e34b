package rendezvous

import (
	"testing"

	"go.uber.org/goleak"
)

// Every Rendezvous a test makes is closed, and its heartbeat goroutine
// with it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
