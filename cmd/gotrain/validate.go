package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// usageError is a bad command line (a flag value, an argument, an unknown
// command): main prints it as one line and exits with status 2, before any
// worker starts. Every other error is a failure of the run, status 1.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// usagef returns a usageError with a formatted message.
func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// badFlag is the error for flag name given value: "--name value: why".
func badFlag(name string, value any, why string) error {
	return usageError{"--" + name + " " + showValue(value) + ": " + why}
}

// flagNeeds is the error for a flag whose value is fine but which needs
// another: "--name: why".
func flagNeeds(name, why string) error { return usageError{"--" + name + ": " + why} }

// showValue prints a flag value as the user would type it, quoted only
// when it would not read as one word.
func showValue(v any) string {
	s := fmt.Sprint(v)
	if s == "" || strings.ContainsAny(s, " \t\n\"'") {
		return strconv.Quote(s)
	}
	return s
}

// flagErrorFunc turns pflag's parse errors (a value of the wrong type, an
// unknown flag, a missing value) into one-line usage errors.
func flagErrorFunc(_ *cobra.Command, err error) error {
	var iv *pflag.InvalidValueError
	if errors.As(err, &iv) {
		f := iv.GetFlag()
		return badFlag(f.Name, iv.GetValue(), "must be "+typeWord(f.Value.Type()))
	}
	return usageError{strings.ReplaceAll(err.Error(), "\n", " ")}
}

// typeWord says what a value of a pflag type looks like.
func typeWord(typ string) string {
	switch typ {
	case "int", "int64", "int32":
		return "an integer"
	case "uint64", "uint", "uint32":
		return "a non-negative integer"
	case "float64", "float32":
		return "a number"
	case "bool":
		return "true or false"
	case "duration":
		return "a duration like 300ms or 5s"
	}
	return "a " + typ
}

// unknownSubcommand is the RunE of a command that only groups others: with
// no argument it shows its help, with one it refuses the unknown name.
func unknownSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return cmd.Help()
	}
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() && c.Name() != "help" && c.Name() != "completion" {
			names = append(names, c.Name())
		}
	}
	where := ""
	if cmd.HasParent() {
		where = cmd.Name() + ": "
	}
	hint := ""
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		hint = "did you mean " + s[0] + "? "
	}
	return usagef("%sunknown command %q (%swant %s; see %s --help)",
		where, args[0], hint, orList(names), cmd.CommandPath())
}

// noArgs refuses positional arguments, as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("%s: unexpected argument %q (it takes flags only; see %s --help)", cmd.CommandPath(), args[0], cmd.CommandPath())
	}
	return nil
}

// checkAtLeast refuses an int flag below lo.
func checkAtLeast(name string, v, lo int) error {
	if v < lo {
		return badFlag(name, v, fmt.Sprintf("must be at least %d", lo))
	}
	return nil
}

// checkPositive refuses a float flag that is not a finite number > 0.
func checkPositive(name string, v float64) error {
	if !(v > 0) || math.IsInf(v, 0) {
		return badFlag(name, v, "must be a number greater than 0")
	}
	return nil
}

// checkOneOf refuses a string flag not among allowed.
func checkOneOf(name, v string, allowed ...string) error {
	for _, a := range allowed {
		if v == a {
			return nil
		}
	}
	return badFlag(name, v, "must be "+orList(allowed))
}

// orList is "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// checkWritableDir refuses a directory flag naming something other than a
// writable directory. A directory that does not exist yet passes if its
// nearest existing parent is one, since it is created on use.
func checkWritableDir(name, dir string) error {
	path := dir
	for {
		info, err := os.Stat(path)
		switch {
		case err == nil && !info.IsDir():
			if path == dir {
				return badFlag(name, dir, "exists and is not a directory")
			}
			return badFlag(name, dir, path+" is not a directory")
		case err == nil:
			if err := tryWrite(path); err != nil {
				return badFlag(name, dir, "cannot write in "+path+": "+rootCause(err))
			}
			return nil
		case !errors.Is(err, os.ErrNotExist):
			return badFlag(name, dir, rootCause(err))
		}
		parent := filepath.Dir(path)
		if parent == path {
			return badFlag(name, dir, "no existing parent directory")
		}
		path = parent
	}
}

// checkSavePath refuses a file flag whose directory does not exist or is
// not writable, or that names a directory.
func checkSavePath(name, path string) error {
	if info, err := os.Stat(path); err == nil && info.IsDir() {
		return badFlag(name, path, "is a directory; want a file path such as "+filepath.Join(path, exampleFile(name)))
	}
	dir := filepath.Dir(path)
	info, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return badFlag(name, path, "directory "+dir+" does not exist")
	case err != nil:
		return badFlag(name, path, rootCause(err))
	case !info.IsDir():
		return badFlag(name, path, dir+" is not a directory")
	}
	if err := tryWrite(dir); err != nil {
		return badFlag(name, path, "cannot write in "+dir+": "+rootCause(err))
	}
	return nil
}

// exampleFile is a file name that suits the file flag name, for the
// message refusing a directory.
func exampleFile(name string) string {
	switch name {
	case "save":
		return "model.safetensors"
	case "metrics":
		return "metrics.jsonl"
	case "trace":
		return "trace.json"
	case "output":
		return "plot.png"
	}
	return name + ".out"
}

// tryWrite creates and removes a file in dir: the one test of
// writability that also holds for ACLs, read-only mounts and root.
func tryWrite(dir string) error {
	f, err := os.CreateTemp(dir, ".gotrain-write-test-*")
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}

// rootCause is the innermost message of a *PathError and the like ("permission
// denied"), as the flag message names the path already.
func rootCause(err error) string {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err.Error()
		}
		err = u
	}
}
