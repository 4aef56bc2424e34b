package cpu

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
)

func TestFormatList(t *testing.T) {
	for _, tc := range []struct {
		cpus []int
		want string
	}{
		{nil, ""},
		{[]int{3}, "3"},
		{[]int{0, 1}, "0-1"},
		{[]int{0, 1, 2, 3, 8}, "0-3,8"},
		{[]int{1, 3, 4, 5, 7}, "1,3-5,7"},
	} {
		if got := FormatList(tc.cpus); got != tc.want {
			t.Errorf("FormatList(%v) = %q, want %q", tc.cpus, got, tc.want)
		}
	}
}

// allowedOrSkip returns this process's CPUs, skipping where threads
// cannot be pinned.
func allowedOrSkip(t *testing.T) []int {
	t.Helper()
	if runtime.GOOS != "linux" {
		_, err := MeasureRoundTrip(context.Background(), 0, 1, 1)
		if err == nil || !strings.Contains(err.Error(), "needs Linux") {
			t.Fatalf("MeasureRoundTrip on %s: %v, want an error saying it needs Linux", runtime.GOOS, err)
		}
		t.Skip("pinning threads to CPUs needs Linux")
	}
	cpus, err := Allowed()
	if err != nil {
		t.Fatal(err)
	}
	if len(cpus) == 0 {
		t.Fatal("Allowed: no CPUs")
	}
	return cpus
}

func TestMeasureRoundTripRefuses(t *testing.T) {
	cpus := allowedOrSkip(t)
	outside := cpus[len(cpus)-1] + 1
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name      string
		ctx       context.Context
		a, b, n   int
		wantInErr string
	}{
		{"same CPU", context.Background(), cpus[0], cpus[0], 10, "to itself"},
		{"no rounds", context.Background(), cpus[0], outside, 0, "want at least 1"},
		{"CPU not allowed", context.Background(), cpus[0], outside, 10, "is not one this process may run on"},
		{"cancelled", cancelled, cpus[0], outside, 10, "canceled"},
	} {
		_, err := MeasureRoundTrip(tc.ctx, tc.a, tc.b, tc.n)
		if err == nil || !strings.Contains(err.Error(), tc.wantInErr) {
			t.Errorf("%s: MeasureRoundTrip(%d, %d, %d) = %v, want an error containing %q", tc.name, tc.a, tc.b, tc.n, err, tc.wantInErr)
		}
		if tc.ctx.Err() != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("%s: %v does not wrap context.Canceled", tc.name, err)
		}
	}
}

// TestMeasureRoundTrip passes a line between the first two CPUs: every
// round trip completes and the figure is per round trip.
func TestMeasureRoundTrip(t *testing.T) {
	cpus := allowedOrSkip(t)
	if len(cpus) < 2 {
		t.Skipf("this process may run on one CPU (%s): no pair to measure", FormatList(cpus))
	}
	rt, err := MeasureRoundTrip(context.Background(), cpus[0], cpus[1], 200)
	if err != nil {
		t.Fatal(err)
	}
	if rt.A != cpus[0] || rt.B != cpus[1] || rt.Rounds != 200 || rt.Time <= 0 {
		t.Errorf("MeasureRoundTrip = %+v, want CPUs %d and %d, 200 rounds, a positive time", rt, cpus[0], cpus[1])
	}
}
