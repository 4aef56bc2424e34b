//go:build !unix

package models

import "time"

// processCPUTime is not measured here: the CPU-time metrics read zero.
func processCPUTime() time.Duration { return 0 }
