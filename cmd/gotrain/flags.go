package main

import (
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/gotrain/gotrain/launch"
)

// The parsers below read torchrun's flag syntax into launch.Config fields.
// Their errors wrap launch.ErrConfig, as the launcher's own checks do.

// parseNProcPerNode parses torchrun's --nproc-per-node: a positive integer,
// or "auto" or "cpu" for the number of CPUs this process may use. "gpu" is
// refused: gotrain trains on CPUs.
func parseNProcPerNode(s string) (int, error) {
	switch s {
	case "auto", "cpu":
		return runtime.NumCPU(), nil
	case "gpu":
		return 0, fmt.Errorf("%w: nproc-per-node gpu: gotrain has no GPU support; use a number, auto or cpu", launch.ErrConfig)
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%w: nproc-per-node %q is not a number, auto or cpu", launch.ErrConfig, s)
	}
	if n <= 0 {
		return 0, fmt.Errorf("%w: nproc-per-node must be at least 1, got %d", launch.ErrConfig, n)
	}
	return n, nil
}

// parseNNodes parses torchrun's --nnodes: N, or MIN:MAX with MIN = MAX.
// Elastic ranges (MIN < MAX) are refused: the launcher does static
// rendezvous only.
func parseNNodes(s string) (int, error) {
	lo, hi, isRange := strings.Cut(s, ":")
	parse := func(v string) (int, error) {
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0, fmt.Errorf("%w: nnodes %q is not N or MIN:MAX", launch.ErrConfig, s)
		}
		if n <= 0 {
			return 0, fmt.Errorf("%w: nnodes must be at least 1, got %q", launch.ErrConfig, s)
		}
		return n, nil
	}
	minNodes, err := parse(lo)
	if err != nil || !isRange {
		return minNodes, err
	}
	maxNodes, err := parse(hi)
	if err != nil {
		return 0, err
	}
	if minNodes != maxNodes {
		return 0, fmt.Errorf("%w: nnodes %s: elastic training (MIN < MAX) is not supported; use a fixed --nnodes N", launch.ErrConfig, s)
	}
	return minNodes, nil
}

// maxIntervalSeconds bounds parseInterval so seconds always fit a Duration.
const maxIntervalSeconds = 1e6

// parseInterval parses a duration given as torchrun does, in seconds
// ("0.1"), or as a Go duration ("100ms"). It must be positive.
func parseInterval(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		secs, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || math.IsNaN(secs) || secs > maxIntervalSeconds {
			return 0, fmt.Errorf("%w: %q is neither seconds nor a duration like 100ms", launch.ErrConfig, s)
		}
		d = time.Duration(secs * float64(time.Second))
	}
	if d <= 0 {
		return 0, fmt.Errorf("%w: duration %q must be positive", launch.ErrConfig, s)
	}
	return d, nil
}
