package main

import (
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

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
		{"auto", runtime.NumCPU(), ""},
		{"cpu", runtime.NumCPU(), ""},
		{"0", 0, "at least 1"},
		{"-2", 0, "at least 1"},
		{"gpu", 0, "no GPU"},
		{"two", 0, `"two" is not a number`},
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
		{"1:4", 0, "elastic training"},
		{"0", 0, "at least 1"},
		{"2:x", 0, "not N or MIN:MAX"},
		{"", 0, "not N or MIN:MAX"},
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
