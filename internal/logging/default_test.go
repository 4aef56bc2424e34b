package logging

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// Library code logs through the program's slog default if it set one,
// else through the launcher's handler, never Go's log-package format.
func TestDefault(t *testing.T) {
	if slog.Default() != initial {
		t.Skip("the test binary's slog default was replaced")
	}
	switch h := Default().Handler().(type) {
	case *slog.TextHandler, *slog.JSONHandler, oneRank: // as FromEnv makes them
	default:
		t.Fatalf("Default's handler is %T, want the launcher's", h)
	}
	if Default() != Default() {
		t.Fatal("Default makes a new logger each call")
	}
	own := slog.New(slog.NewJSONHandler(&bytes.Buffer{}, nil))
	slog.SetDefault(own)
	defer slog.SetDefault(initial)
	if Default() != own {
		t.Fatal("Default ignores the program's slog default")
	}
}

// WithRank names the rank once on every record, whether the record or
// the logger names it already.
func TestWithRank(t *testing.T) {
	var b bytes.Buffer
	plain := slog.New(slog.NewTextHandler(&b, nil))
	l := WithRank(plain, 2)
	l.Info("a")
	l.Info("b", "rank", 2)
	l.With("k", 1).Info("c", "rank", 2)
	l.Info("d", "rank", 5)
	if got := b.String(); strings.Count(got, "rank=2") != 4 || !strings.Contains(got, "msg=d rank=2 rank=5") {
		t.Fatalf("records %q; want rank=2 once on each, and a peer's rank=5 kept", got)
	}
	if WithRank(l, 2) != l {
		t.Error("WithRank of a logger with that rank made a new one")
	}
	b.Reset()
	withRank := New(&b, Text, slog.Int("rank", 3))
	if WithRank(withRank, 3) != withRank {
		t.Error("WithRank of New's logger with that rank made a new one")
	}
	withRank.Info("e", "rank", 3)
	if got := b.String(); strings.Count(got, "rank=3") != 1 {
		t.Fatalf("record %q; want rank=3 once", got)
	}
}
