package jobflag

import (
	"math"
	"testing"
)

func TestEstimateNamesHeaviestFlag(t *testing.T) {
	a, b := 10, 1000
	bytes := func() float64 { return float64(a)*1 + float64(b)*float64(b) }
	sizes := []Size{{"a", &a, 10}, {"b", &b, 4}}
	m := Estimate(bytes, func() string { return "parts" }, sizes)
	if m.Bytes != 1000010 || m.Flag != "b" || m.Value != 1000 || m.Parts != "parts" {
		t.Errorf("Estimate = %+v, want 1000010 bytes naming b 1000", m)
	}
	if a != 10 || b != 1000 {
		t.Errorf("fields left at %d, %d", a, b)
	}
	b = 4
	if m := Estimate(bytes, func() string { return "" }, sizes); m.Flag != "a" || m.Bytes != 26 {
		t.Errorf("at the defaults: %+v, want the first flag", m)
	}
}

func TestEstimateClamps(t *testing.T) {
	n := 1
	m := Estimate(func() float64 { return 1e30 }, func() string { return "" }, []Size{{"n", &n, 1}})
	if m.Bytes != math.MaxInt64 {
		t.Errorf("Bytes = %d, want MaxInt64", m.Bytes)
	}
}

func TestBytes(t *testing.T) {
	for _, tc := range []struct {
		n    float64
		want string
	}{{1, "1 MiB"}, {300 << 20, "300 MiB"}, {1.5 * (1 << 30), "1.5 GiB"}, {3 << 40, "3.0 TiB"}} {
		if got := Bytes(tc.n); got != tc.want {
			t.Errorf("Bytes(%v) = %q, want %q", tc.n, got, tc.want)
		}
	}
}
