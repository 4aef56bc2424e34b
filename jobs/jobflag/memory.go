package jobflag

import (
	"math"
	"strconv"
)

// Memory is a job's estimate of the memory one of its ranks needs at its
// peak, and the size flag that weighs most in it: the one to name when
// the estimate does not fit.
type Memory struct {
	Bytes int64  // the estimate; math.MaxInt64 for any need beyond it
	Flag  string // the size flag that weighs most
	Value int    // its value
	// Parts says what the estimate counts, for the message that refuses
	// it: "parameters, gradients and AdamW state 1.2 GiB, activations 3 GiB".
	Parts string
}

// Size is one size flag of a job: its name, the Config field it sets and
// the field's default.
type Size struct {
	Flag    string
	Field   *int
	Default int
}

// Estimate returns the estimate bytes gives for the Config that sizes
// point into, with the size flag that weighs most: the one whose return
// to its default lowers the estimate the most (the first size when none
// does). It sets each field to its default in turn and back, so the
// fields must belong to a copy only bytes reads.
func Estimate(bytes func() float64, parts func() string, sizes []Size) Memory {
	total := bytes()
	m := Memory{Bytes: clampBytes(total), Flag: sizes[0].Flag, Value: *sizes[0].Field, Parts: parts()}
	best := 0.0
	for _, s := range sizes {
		v := *s.Field
		*s.Field = s.Default
		if drop := total - bytes(); drop > best {
			best, m.Flag, m.Value = drop, s.Flag, v
		}
		*s.Field = v
	}
	return m
}

// clampBytes is b as an int64, math.MaxInt64 beyond it.
func clampBytes(b float64) int64 {
	if !(b < math.MaxInt64) {
		return math.MaxInt64
	}
	return int64(math.Ceil(b))
}

// Bytes shows n bytes as a person reads them: "512 MiB", "3.2 GiB",
// "1.9 TiB".
func Bytes(n float64) string {
	switch {
	case n >= 1<<40:
		return strconv.FormatFloat(n/(1<<40), 'f', 1, 64) + " TiB"
	case n >= 1<<30:
		return strconv.FormatFloat(n/(1<<30), 'f', 1, 64) + " GiB"
	}
	return strconv.FormatFloat(math.Ceil(n/(1<<20)), 'f', 0, 64) + " MiB"
}
