// Package logging makes the one log/slog handler that gotrain's launcher
// and every gotrain component in its workers log through, so that one run
// prints one log format: text records by default, JSON records with
// --log-format json. The launcher passes the format to its workers in
// GOTRAIN_LOG_FORMAT, and a worker's records carry its RANK.
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
)

// Environment variables a worker's handler is configured by.
const (
	// EnvFormat carries the launcher's --log-format to its workers.
	EnvFormat = "GOTRAIN_LOG_FORMAT"
	// envRank is the worker's global rank, set by the launcher (torchrun's
	// contract); records of a process with it carry rank=RANK.
	envRank = "RANK"
)

// Log formats.
const (
	Text = "text" // slog's key=value text records, the default
	JSON = "json" // one JSON object per record
)

// Formats lists the accepted formats, for flag help and errors.
const Formats = Text + " or " + JSON

// CheckFormat returns an error unless format is a known format or "" (the
// default, Text).
func CheckFormat(format string) error {
	switch format {
	case "", Text, JSON:
		return nil
	}
	return fmt.Errorf("unknown log format %q (want %s)", format, Formats)
}

// New returns a logger writing records to w in format ("" is Text, an
// unknown format panics: check it first with CheckFormat), with attrs on
// every record. With an integer "rank" among attrs, a record that names
// the same rank again says it once (see WithRank).
func New(w io.Writer, format string, attrs ...slog.Attr) *slog.Logger {
	var h slog.Handler
	switch format {
	case "", Text:
		h = slog.NewTextHandler(w, nil)
	case JSON:
		h = slog.NewJSONHandler(w, nil)
	default:
		panic(fmt.Sprintf("logging: New: unknown log format %q", format))
	}
	if len(attrs) > 0 {
		h = h.WithAttrs(attrs)
	}
	for _, a := range attrs {
		if v := a.Value.Resolve(); a.Key == "rank" && v.Kind() == slog.KindInt64 {
			h = oneRank{h, v.Int64()}
		}
	}
	return slog.New(h)
}

// WithRank returns l with rank=rank on every record, said once: a record
// that names the same rank again (library code does, for loggers without
// it) drops the repeat. A logger from New, FromEnv or WithRank that
// already carries this rank is returned as it is.
func WithRank(l *slog.Logger, rank int) *slog.Logger {
	if h, ok := l.Handler().(oneRank); ok && h.rank == int64(rank) {
		return l
	}
	return slog.New(oneRank{l.Handler().WithAttrs([]slog.Attr{slog.Int("rank", rank)}), int64(rank)})
}

// initial is the slog default before the program replaced it, if it does.
var initial = slog.Default()

// env is the logger FromEnv makes for the process on stderr, made once.
var env = sync.OnceValue(func() *slog.Logger { return FromEnv(os.Stderr, "") })

// Default returns the logger library code logs through when given none:
// the program's slog default if it set one (slog.SetDefault), else the
// logger FromEnv makes on stderr, in the launcher's format
// (GOTRAIN_LOG_FORMAT) with the worker's rank, so that a program that
// sets up no logging prints its library records as the launcher prints
// its own.
func Default() *slog.Logger {
	if l := slog.Default(); l != initial {
		return l
	}
	return env()
}

// FromEnv returns the logger for this process writing to w: in format, or
// if it is "" the format GOTRAIN_LOG_FORMAT names (Text if that is unset or
// unknown, with a warning for unknown: a log format never stops a job),
// and with rank=RANK on every record when RANK holds a rank, as in a
// launched worker.
func FromEnv(w io.Writer, format string) *slog.Logger {
	if format == "" {
		format = os.Getenv(EnvFormat)
	}
	bad := CheckFormat(format)
	if bad != nil {
		format = Text
	}
	var attrs []slog.Attr
	r, err := strconv.Atoi(os.Getenv(envRank))
	hasRank := err == nil && r >= 0
	if hasRank {
		attrs = append(attrs, slog.Int("rank", r))
	}
	l := New(w, format, attrs...)
	if bad != nil {
		l.Warn("logging: ignoring the log format", "err", bad, "using", Text)
	}
	return l
}

// oneRank drops a record's "rank" attribute when it repeats the
// process's rank, which the handler it wraps adds to every record.
type oneRank struct {
	slog.Handler
	rank int64
}

func (h oneRank) same(a slog.Attr) bool {
	v := a.Value.Resolve()
	return a.Key == "rank" && v.Kind() == slog.KindInt64 && v.Int64() == h.rank
}

func (h oneRank) Handle(ctx context.Context, r slog.Record) error {
	dup := false
	r.Attrs(func(a slog.Attr) bool {
		dup = dup || h.same(a)
		return !dup
	})
	if !dup {
		return h.Handler.Handle(ctx, r)
	}
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		if !h.same(a) {
			out.AddAttrs(a)
		}
		return true
	})
	return h.Handler.Handle(ctx, out)
}

func (h oneRank) WithAttrs(attrs []slog.Attr) slog.Handler {
	return oneRank{h.Handler.WithAttrs(attrs), h.rank}
}

func (h oneRank) WithGroup(name string) slog.Handler {
	return oneRank{h.Handler.WithGroup(name), h.rank}
}
