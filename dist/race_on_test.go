//go:build race

package dist

// raceEnabled shrinks the test matrix under the race detector, which
// makes loopback collectives ~10× slower.
const raceEnabled = true
