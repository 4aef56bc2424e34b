package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/gotrain/gotrain/distributed/clusterenv"
	"github.com/gotrain/gotrain/launch"
)

// The parsers below read torchrun's flag syntax into launch.Config fields.
// Their errors say what is wrong with the value, for badFlag to put after
// the flag's name and value, and match launch.ErrConfig, as the
// launcher's own checks do.

// valueError is why a flag's value is refused.
type valueError string

func (e valueError) Error() string { return string(e) }

// Is makes a valueError match launch.ErrConfig.
func (e valueError) Is(target error) bool { return target == launch.ErrConfig }

// parseNProcPerNode parses torchrun's --nproc-per-node: a positive integer,
// or "auto" or "cpu" for the number of CPUs this process may use. "gpu" is
// refused: gotrain trains on CPUs.
func parseNProcPerNode(s string) (int, error) {
	switch s {
	case "auto", "cpu":
		return clusterenv.CPUs(), nil // a container's CPU quota, not the host's CPUs
	case "gpu":
		return 0, valueError("gotrain has no GPU support; use a number, auto or cpu")
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, valueError("must be a number of workers, auto or cpu")
	}
	if n <= 0 {
		return 0, valueError("must be at least 1")
	}
	return n, nil
}

// parseNNodes parses torchrun's --nnodes for static rendezvous: N, or
// MIN:MAX with MIN = MAX. Elastic ranges (MIN < MAX) are refused here:
// they take the rendezvous flags (elastic.go).
func parseNNodes(s string) (int, error) {
	lo, hi, isRange := strings.Cut(s, ":")
	parse := func(v string) (int, error) {
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0, valueError("must be N or MIN:MAX")
		}
		if n <= 0 {
			return 0, valueError("must be at least 1")
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
		return 0, valueError("an elastic range (MIN < MAX) needs --rdzv-endpoint; for static rendezvous use a fixed --nnodes N")
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
			return 0, valueError("must be seconds (0.1) or a duration like 100ms")
		}
		d = time.Duration(secs * float64(time.Second))
	}
	if d <= 0 {
		return 0, valueError("must be positive")
	}
	return d, nil
}

// parseStreams parses torchrun's --redirects and --tee: a Std for every
// local rank (0 none, 1 stdout, 2 stderr, 3 both), or local-rank:Std pairs
// ("0:1,1:2") where the ranks not named get none.
func parseStreams(s string, nproc int) (launch.Streams, error) {
	parseStd := func(v string) (launch.Std, error) {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < int(launch.StdNone) || n > int(launch.StdAll) {
			return 0, valueError("must be 0 (none), 1 (stdout), 2 (stderr), 3 (both), or local-rank:value pairs like 0:3,1:2")
		}
		return launch.Std(n), nil
	}
	if !strings.Contains(s, ":") {
		std, err := parseStd(s)
		return launch.Streams{All: std}, err
	}
	out := launch.Streams{ByLocalRank: map[int]launch.Std{}}
	for _, pair := range strings.Split(s, ",") {
		r, v, ok := strings.Cut(pair, ":")
		if !ok {
			return launch.Streams{}, valueError("mixes a value for all ranks with local-rank:value pairs")
		}
		rank, err := parseLocalRank(r, nproc)
		if err != nil {
			return launch.Streams{}, err
		}
		if _, dup := out.ByLocalRank[rank]; dup {
			return launch.Streams{}, valueError("names local rank " + strconv.Itoa(rank) + " twice")
		}
		if out.ByLocalRank[rank], err = parseStd(v); err != nil {
			return launch.Streams{}, err
		}
	}
	return out, nil
}

// parseLocalRanks parses torchrun's --local-ranks-filter: comma-separated
// local ranks.
func parseLocalRanks(s string, nproc int) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		r, err := parseLocalRank(f, nproc)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// parseLocalRank parses a local rank in [0, nproc).
func parseLocalRank(s string, nproc int) (int, error) {
	r, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return 0, valueError(fmt.Sprintf("%q is not a local rank", s))
	}
	if r < 0 || r >= nproc {
		return 0, valueError(fmt.Sprintf("local rank %d out of range [0, %d) for --nproc-per-node %d", r, nproc, nproc))
	}
	return r, nil
}
