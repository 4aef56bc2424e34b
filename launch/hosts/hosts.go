// Package hosts parses the host lists of a multi-node job: the value of
// --hosts (HOST[:SLOTS][,HOST[:SLOTS]…]) and a hostfile of "host slots=N"
// lines, as DeepSpeed and Open MPI read them.
package hosts

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// ErrSyntax is matched (errors.Is) by every error about a malformed host
// list, each a *SyntaxError.
var ErrSyntax = errors.New("hosts: bad host list")

// SyntaxError is a malformed host list or hostfile.
type SyntaxError struct {
	// Entry is what is malformed, as written: an entry of the list, a
	// line of the hostfile, a host listed twice, or the whole list or
	// file when no one entry is at fault.
	Entry string
	// Reason says what is wrong, naming Entry (and a hostfile's line):
	// `"a:0": slots must be a whole number of at least 1, got "0"`.
	Reason string
}

func (e *SyntaxError) Error() string { return ErrSyntax.Error() + ": " + e.Reason }

// Is makes a SyntaxError match ErrSyntax.
func (e *SyntaxError) Is(target error) bool { return target == ErrSyntax }

// syntaxError is the *SyntaxError about entry with a formatted reason.
func syntaxError(entry, format string, args ...any) error {
	return &SyntaxError{Entry: entry, Reason: fmt.Sprintf(format, args...)}
}

// Host is one machine of a job.
type Host struct {
	// Name is how ssh reaches it: a name from ~/.ssh/config or DNS, an
	// IPv4 address, an IPv6 address (written in brackets in a list), with
	// an optional user@ in front.
	Name string
	// Slots is how many workers to run there; 0 when the list does not
	// say, and --nproc-per-node decides.
	Slots int
}

// String is the host as a --hosts entry.
func (h Host) String() string {
	name := h.Name
	if strings.Contains(hostPart(name), ":") {
		name = bracket(name)
	}
	if h.Slots > 0 {
		return name + ":" + strconv.Itoa(h.Slots)
	}
	return name
}

// Parse reads a --hosts value: comma-separated HOST[:SLOTS] entries, the
// first of which is node 0. IPv6 addresses go in brackets ([fd00::1]:2).
func Parse(list string) ([]Host, error) {
	var out []Host
	for _, entry := range strings.Split(list, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			return nil, syntaxError(list, "%q has an empty entry", list)
		}
		h, err := parseEntry(entry)
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, checkUnique(out)
}

// parseEntry reads one HOST[:SLOTS].
func parseEntry(entry string) (Host, error) {
	user, rest := "", entry
	if i := strings.LastIndex(entry, "@"); i >= 0 {
		user, rest = entry[:i+1], entry[i+1:]
	}
	name, slots := rest, ""
	switch {
	case strings.HasPrefix(rest, "["):
		end := strings.Index(rest, "]")
		if end < 0 {
			return Host{}, syntaxError(entry, "%q: unclosed [", entry)
		}
		name = rest[1:end]
		switch tail := rest[end+1:]; {
		case tail == "":
		case strings.HasPrefix(tail, ":"):
			slots = tail[1:]
		default:
			return Host{}, syntaxError(entry, "%q: want [ADDRESS]:SLOTS", entry)
		}
	case strings.Count(rest, ":") == 1:
		name, slots, _ = strings.Cut(rest, ":")
	case strings.Count(rest, ":") > 1:
		return Host{}, syntaxError(entry, "%q: write an IPv6 address in brackets, as [%s]", entry, rest)
	}
	h := Host{Name: user + name}
	if err := checkName(entry, entry, name, user); err != nil {
		return Host{}, err
	}
	if slots != "" || strings.HasSuffix(rest, ":") {
		n, err := strconv.Atoi(slots)
		if err != nil || n < 1 {
			return Host{}, syntaxError(entry, "%q: slots must be a whole number of at least 1, got %q", entry, slots)
		}
		h.Slots = n
	}
	return h, nil
}

// ParseFile reads a hostfile: one host per line, optionally followed by
// slots=N (Open MPI and DeepSpeed's syntax; max_slots= is accepted and
// ignored); '#' starts a comment; blank lines are skipped. name labels
// errors.
func ParseFile(r io.Reader, name string) ([]Host, error) {
	var out []Host
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		where, entry := fmt.Sprintf("%s:%d", name, n), strings.TrimSpace(line)
		h := Host{Name: fields[0]}
		if strings.HasPrefix(h.Name, "[") && strings.HasSuffix(h.Name, "]") {
			h.Name = h.Name[1 : len(h.Name)-1]
		}
		user, host := "", h.Name
		if i := strings.LastIndex(host, "@"); i >= 0 {
			user, host = host[:i+1], host[i+1:]
		}
		if err := checkName(entry, where+": "+fields[0], host, user); err != nil {
			return nil, err
		}
		for _, f := range fields[1:] {
			key, val, ok := strings.Cut(f, "=")
			switch {
			case ok && key == "slots":
				v, err := strconv.Atoi(val)
				if err != nil || v < 1 {
					return nil, syntaxError(entry, "%s: slots must be a whole number of at least 1, got %q", where, val)
				}
				h.Slots = v
			case ok && key == "max_slots":
			default:
				return nil, syntaxError(entry, "%s: unknown field %q (want slots=N)", where, f)
			}
		}
		out = append(out, h)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("hosts: read %s: %w", name, err)
	}
	if len(out) == 0 {
		return nil, syntaxError(name, "%s lists no host", name)
	}
	return out, checkUnique(out)
}

// ReadFile reads the hostfile at path (see ParseFile).
func ReadFile(path string) ([]Host, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("hosts: %w", err)
	}
	defer f.Close()
	return ParseFile(f, path)
}

// checkName refuses names ssh would misread or a shell would split; the
// error names entry as label (a hostfile's with its line).
func checkName(entry, label, name, user string) error {
	switch {
	case name == "":
		return syntaxError(entry, "%q has no host name", label)
	case user == "@":
		return syntaxError(entry, "%q has an empty user before @", label)
	case strings.HasPrefix(name, "-") || strings.HasPrefix(user, "-"):
		return syntaxError(entry, "%q: a host name cannot start with '-'", label)
	case strings.ContainsAny(name+user, " \t\"'`$\\;|&<>()*?[]{}!/="):
		return syntaxError(entry, "%q: a host name cannot hold spaces, quotes or shell characters", label)
	}
	return nil
}

// checkUnique refuses a host listed twice: its workers would collide on
// node ranks and ports.
func checkUnique(hs []Host) error {
	seen := map[string]bool{}
	for _, h := range hs {
		if seen[h.Name] {
			return syntaxError(h.Name, "host %s is listed twice (give it more slots instead)", h.Name)
		}
		seen[h.Name] = true
	}
	return nil
}

// hostPart is name without its user@.
func hostPart(name string) string {
	if i := strings.LastIndex(name, "@"); i >= 0 {
		return name[i+1:]
	}
	return name
}

// bracket writes user@[addr] for an IPv6 address.
func bracket(name string) string {
	if i := strings.LastIndex(name, "@"); i >= 0 {
		return name[:i+1] + "[" + name[i+1:] + "]"
	}
	return "[" + name + "]"
}

// Addr is the host's name or address without its user@, as other
// machines dial it.
func (h Host) Addr() string { return hostPart(h.Name) }
