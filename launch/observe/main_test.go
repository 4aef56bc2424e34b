package observe

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that a closed hub leaves no goroutine behind (its
// servers, its signal forwarder).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
