//go:build !unix

package tensor

import "time"

// processCPUTime is unavailable here; benchmarks then omit samples/cpu-s.
func processCPUTime() time.Duration { return 0 }
