package console

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// A replica change prints its line above the live bar, and the bar
// shows the replicas left from then on.
func TestReplicaChangeAboveTheBar(t *testing.T) {
	var out bytes.Buffer
	clock := &fakeClock{t: time.Unix(0, 0), step: time.Second}
	c := New(Options{Out: &out, Mode: Live, Width: func() int { return 120 }, Now: clock.now})
	c.Event(0, []byte(`{"kind":"epoch","epoch":1,"epochs":2,"steps":100}`))
	c.Event(0, stepEvent(1, 2, 100, 10, 640, 1, 0.5, 0.1))
	if got := screen(out.String()); strings.Contains(got[len(got)-1], "replicas") {
		t.Fatalf("bar %q shows replicas before any changed", got[len(got)-1])
	}
	c.Event(0, []byte(`{"kind":"replicas","data":{"change":"left","replica":"vm-001","replicas":2,"of":3,"step":120}}`))
	c.Event(0, []byte(`{"kind":"replicas","data":{"change":"healed","replica":"vm-001","replicas":3,"of":3,"step":140,"source":"vm-000"}}`))
	c.Event(0, []byte(`{"kind":"replicas","data":{}}`)) // no change: ignored
	c.Event(0, []byte(`{"kind":"replicas","data":{"change":"left","replica":"vm-002","replicas":2,"of":3,"step":150}}`))
	c.Event(0, stepEvent(1, 2, 100, 20, 1280, 2, 0.4, 0.1))
	got := screen(out.String())
	want := []string{
		"replica vm-001 left: 2/3 replicas at step 120",
		"replica vm-001 healed from vm-000: 3/3 replicas at step 140",
		"replica vm-002 left: 2/3 replicas at step 150",
	}
	if len(got) != len(want)+1 {
		t.Fatalf("screen %q: want the lines %q, then the bar", got, want)
	}
	for i, l := range want {
		if got[i] != l {
			t.Errorf("screen line %d is %q; want %q", i, got[i], l)
		}
	}
	if bar := got[len(got)-1]; !strings.HasPrefix(bar, "epoch 1/2 [") || !strings.Contains(bar, "replicas 2/3") {
		t.Fatalf("bar %q does not show replicas 2/3", bar)
	}
}

// In plain mode the change is a line of its own, and the periodic line
// carries the count.
func TestReplicaChangePlain(t *testing.T) {
	var out bytes.Buffer
	clock := &fakeClock{t: time.Unix(0, 0), step: time.Minute}
	c := New(Options{Out: &out, Mode: Plain, Width: func() int { return 120 }, Now: clock.now})
	c.Event(0, []byte(`{"kind":"epoch","epoch":1,"epochs":1,"steps":100}`))
	c.Event(0, []byte(`{"kind":"replicas","data":{"change":"joined","replica":"vm-003","replicas":4,"of":3,"step":7}}`))
	c.Event(0, stepEvent(1, 1, 100, 10, 640, 1, 0.5, 0.1))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || lines[0] != "replica vm-003 joined: 4/3 replicas at step 7" || !strings.Contains(lines[1], "replicas 4/3") {
		t.Fatalf("plain output %q: want the change's line, then a progress line with replicas 4/3", lines)
	}
	if strings.Contains(out.String(), "\r") {
		t.Fatalf("plain output %q has a carriage return", out.String())
	}
}
