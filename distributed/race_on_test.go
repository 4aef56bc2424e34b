//go:build race

package distributed

// raceEnabled shrinks the test matrix under the race detector, which
// makes loopback collectives ~10× slower.
const raceEnabled = true
