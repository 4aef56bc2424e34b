// Package jobflag holds what the jobs under jobs/ share to take their
// Config from a command line: flag values for the optional fields of a
// Config (a *float64 or *int whose nil means the default) and the checks
// whose errors name the flag, as `gotrain train` reports them.
package jobflag

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
)

// Error is a flag value refused: "--flag value: why", or "--flag: why"
// when the flag needs another rather than another value.
type Error struct {
	Flag     string
	Value    string // as given
	HasValue bool   // false for "--flag: why"
	Why      string
}

func (e *Error) Error() string {
	if !e.HasValue {
		return "--" + e.Flag + ": " + e.Why
	}
	return "--" + e.Flag + " " + show(e.Value) + ": " + e.Why
}

// show prints a value as the user would type it, quoted only when it
// would not read as one word.
func show(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\n\"'") {
		return strconv.Quote(s)
	}
	return s
}

// Bad is the error for flag name given value: "--name value: why".
func Bad(name string, value any, why string) error {
	return &Error{Flag: name, Value: fmt.Sprint(value), HasValue: true, Why: why}
}

// Needs is the error for a flag that needs another: "--name: why".
func Needs(name, why string) error { return &Error{Flag: name, Why: why} }

// AtLeast refuses an int flag below lo.
func AtLeast(name string, v, lo int) error {
	if v < lo {
		return Bad(name, v, fmt.Sprintf("must be at least %d", lo))
	}
	return nil
}

// Positive refuses a float flag that is not a finite number > 0.
func Positive(name string, v float64) error {
	if !(v > 0) || math.IsInf(v, 0) {
		return Bad(name, v, "must be a number greater than 0")
	}
	return nil
}

// NonNegative refuses a float flag that is not a finite number >= 0.
func NonNegative(name string, v float64) error {
	if !(v >= 0) || math.IsInf(v, 0) {
		return Bad(name, v, "must be a finite number of at least 0")
	}
	return nil
}

// OneOf refuses a string flag not among allowed.
func OneOf(name, v string, allowed ...string) error {
	for _, a := range allowed {
		if v == a {
			return nil
		}
	}
	return Bad(name, v, "must be "+OrList(allowed))
}

// OrList is "a, b or c".
func OrList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// Float returns the value of a flag setting the optional field *p: left
// unset, the field stays nil (the Config's default, def, shown in the
// help when not nil); given, it points at the number.
func Float(p **float64, def *float64) pflag.Value { return &optFloat{p, def} }

type optFloat struct {
	p   **float64
	def *float64
}

func (o *optFloat) String() string {
	switch {
	case o.p != nil && *o.p != nil:
		return strconv.FormatFloat(**o.p, 'g', -1, 64)
	case o.def != nil:
		return strconv.FormatFloat(*o.def, 'g', -1, 64)
	}
	return ""
}

func (o *optFloat) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return err
	}
	*o.p = &v
	return nil
}

func (o *optFloat) Type() string { return "float64" }

// Int is Float for an optional int field.
func Int(p **int, def *int) pflag.Value { return &optInt{p, def} }

type optInt struct {
	p   **int
	def *int
}

func (o *optInt) String() string {
	switch {
	case o.p != nil && *o.p != nil:
		return strconv.Itoa(**o.p)
	case o.def != nil:
		return strconv.Itoa(*o.def)
	}
	return ""
}

func (o *optInt) Set(s string) error {
	v, err := strconv.ParseInt(s, 0, 0)
	if err != nil {
		return err
	}
	n := int(v)
	*o.p = &n
	return nil
}

func (o *optInt) Type() string { return "int" }

// RootCause is the innermost message of err ("permission denied"), for a
// flag's error that names the path already.
func RootCause(err error) string {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err.Error()
		}
		err = u
	}
}
