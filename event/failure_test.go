package event_test

import (
	"testing"
	"time"

	"github.com/gotrain/gotrain/event"
)

func TestPeerLine(t *testing.T) {
	for _, tc := range []struct {
		rank    int
		silence time.Duration
		line    string
	}{
		{3, 0, "failed because of rank 3"},
		{12, 14*time.Second + 40*time.Millisecond, "failed because of rank 12 (no heartbeat for 14s)"},
		{0, 2640 * time.Millisecond, "failed because of rank 0 (no heartbeat for 2.6s)"},
	} {
		line := event.PeerLine(tc.rank, tc.silence)
		if line != tc.line {
			t.Errorf("PeerLine(%d, %v) = %q, want %q", tc.rank, tc.silence, line, tc.line)
		}
		rank, silence, ok := event.ParsePeerLine(line)
		if !ok || rank != tc.rank || silence != tc.silence.Round(100*time.Millisecond) {
			t.Errorf("ParsePeerLine(%q) = %d, %v, %v", line, rank, silence, ok)
		}
	}
	for _, line := range []string{"", "failed because of rank", "failed because of rank x", "gotrain: failed because of rank 1",
		"failed because of rank 1 (no heartbeat for soon)", "failed because of rank 99999999999999999999"} {
		if _, _, ok := event.ParsePeerLine(line); ok {
			t.Errorf("ParsePeerLine(%q) accepted it", line)
		}
	}
}
