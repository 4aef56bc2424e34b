package event

import (
	"fmt"
	"regexp"
	"strconv"
	"time"
)

// ExitPeer is the exit status of a worker that failed only because another
// rank did (the peer's connection ended, it left or aborted the group, it
// went silent): a secondary failure. A launcher that sees it looks for the
// primary failure elsewhere, and the worker's last stderr line, a PeerLine,
// says which rank it blames.
const ExitPeer = 86

// PeerLine is the last line a worker that exits with ExitPeer writes to
// stderr: "failed because of rank 1", and "(no heartbeat for 2.6s)" after
// it when that rank fell silent for silence. ParsePeerLine reads it back.
func PeerLine(rank int, silence time.Duration) string {
	s := "failed because of rank " + strconv.Itoa(rank)
	if silence > 0 {
		s += fmt.Sprintf(" (no heartbeat for %v)", silence.Round(100*time.Millisecond))
	}
	return s
}

var peerLine = regexp.MustCompile(`^failed because of rank (\d+)(?: \(no heartbeat for ([0-9a-zµ.]+)\))?$`)

// ParsePeerLine reads a line PeerLine wrote: the rank it blames and the
// silence it names (0 if none); ok is false for any other line.
func ParsePeerLine(line string) (rank int, silence time.Duration, ok bool) {
	m := peerLine.FindStringSubmatch(line)
	if m == nil {
		return 0, 0, false
	}
	rank, err := strconv.Atoi(m[1])
	if err != nil {
		return 0, 0, false
	}
	if m[2] != "" {
		if silence, err = time.ParseDuration(m[2]); err != nil {
			return 0, 0, false
		}
	}
	return rank, silence, true
}
