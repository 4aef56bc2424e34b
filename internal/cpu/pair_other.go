//go:build !linux

package cpu

import (
	"errors"
	"runtime"
)

// errNoAffinity is returned where threads cannot be pinned to CPUs.
var errNoAffinity = errors.New("pinning threads to CPUs needs Linux, not " + runtime.GOOS)

// Allowed returns the CPUs this process may run on; Linux only.
func Allowed() ([]int, error) { return nil, errNoAffinity }

func onCPU(int, func() error) error { return errNoAffinity }
