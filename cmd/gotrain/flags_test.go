package main

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/distributed/clusterenv"
	"github.com/gotrain/gotrain/launch"
)

func TestParseNProcPerNode(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		err  string
	}{
		{"1", 1, ""},
		{"8", 8, ""},
		{"auto", clusterenv.CPUs(), ""},
		{"cpu", clusterenv.CPUs(), ""},
		{"0", 0, "at least 1"},
		{"-2", 0, "at least 1"},
		{"gpu", 0, "no GPU"},
		{"two", 0, "must be a number of workers, auto or cpu"},
	} {
		got, err := parseNProcPerNode(tc.in)
		if tc.err != "" {
			if !errors.Is(err, launch.ErrConfig) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseNProcPerNode(%q) error %v, want launch.ErrConfig with %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("parseNProcPerNode(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestParseNNodes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		err  string
	}{
		{"1", 1, ""},
		{"4", 4, ""},
		{"2:2", 2, ""},
		{"1:4", 0, "elastic range"},
		{"0", 0, "at least 1"},
		{"2:x", 0, "must be N or MIN:MAX"},
		{"", 0, "must be N or MIN:MAX"},
	} {
		got, err := parseNNodes(tc.in)
		if tc.err != "" {
			if !errors.Is(err, launch.ErrConfig) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseNNodes(%q) error %v, want launch.ErrConfig with %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("parseNNodes(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestParseInterval(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"0.1", 100 * time.Millisecond, true},
		{"5", 5 * time.Second, true},
		{"250ms", 250 * time.Millisecond, true},
		{"0", 0, false},
		{"-1", 0, false},
		{"NaN", 0, false},
		{"1e300", 0, false},
		{"soon", 0, false},
	} {
		got, err := parseInterval(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseInterval(%q) = %v, %v; want %v, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestParseStreams(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want launch.Streams
		err  string
	}{
		{"0", launch.Streams{}, ""},
		{"3", launch.Streams{All: launch.StdAll}, ""},
		{"0:1,1:2", launch.Streams{ByLocalRank: map[int]launch.Std{0: launch.StdOut, 1: launch.StdErr}}, ""},
		{"1:3", launch.Streams{ByLocalRank: map[int]launch.Std{1: launch.StdAll}}, ""},
		{"4", launch.Streams{}, "must be 0 (none)"},
		{"-1", launch.Streams{}, "must be 0 (none)"},
		{"x", launch.Streams{}, "must be 0 (none)"},
		{"0:1,3", launch.Streams{}, "mixes"},
		{"2:1", launch.Streams{}, "local rank 2 out of range [0, 2)"},
		{"0:1,0:2", launch.Streams{}, "twice"},
		{"a:1", launch.Streams{}, `"a" is not a local rank`},
	} {
		got, err := parseStreams(tc.in, 2)
		if tc.err != "" {
			if !errors.Is(err, launch.ErrConfig) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseStreams(%q) error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got.All != tc.want.All || !maps.Equal(got.ByLocalRank, tc.want.ByLocalRank) {
			t.Errorf("parseStreams(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestParseLocalRanks(t *testing.T) {
	if got, err := parseLocalRanks("0, 2", 3); err != nil || !slices.Equal(got, []int{0, 2}) {
		t.Errorf("parseLocalRanks(0, 2) = %v, %v", got, err)
	}
	for _, in := range []string{"3", "-1", "", "0,,1", "x"} {
		if _, err := parseLocalRanks(in, 3); err == nil {
			t.Errorf("parseLocalRanks(%q) accepted", in)
		}
	}
}
