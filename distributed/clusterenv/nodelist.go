package clusterenv

import (
	"fmt"
	"strconv"
	"strings"
)

// maxExpand bounds how many hosts or counts one expression may expand
// to, so a malformed range ("n[0-999999999]") fails instead of
// allocating without end.
const maxExpand = 1 << 20

// ParseNodeList expands a Slurm host list such as "gnode[01-04,07],login1"
// into its host names, in order, as `scontrol show hostnames` does: a
// bracket holds comma-separated numbers and ranges whose zero padding is
// kept, and several brackets in one name multiply ("r[1-2]n[1-2]").
func ParseNodeList(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("empty node list")
	}
	var hosts []string
	for _, item := range splitTop(s) {
		if item == "" {
			return nil, fmt.Errorf("node list %q: empty host name", s)
		}
		expanded, err := expandHost(item)
		if err != nil {
			return nil, fmt.Errorf("node list %q: %w", s, err)
		}
		hosts = append(hosts, expanded...)
		if len(hosts) > maxExpand {
			return nil, fmt.Errorf("node list %q: more than %d hosts", s, maxExpand)
		}
	}
	return hosts, nil
}

// splitTop splits s at the commas outside brackets.
func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, r := range s {
		switch r {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

// expandHost expands one host expression: a prefix, then a bracket and
// the rest (which may hold more brackets).
func expandHost(s string) ([]string, error) {
	open := strings.IndexByte(s, '[')
	if open < 0 {
		if strings.ContainsAny(s, "]") {
			return nil, fmt.Errorf("unbalanced ']' in %q", s)
		}
		return []string{s}, nil
	}
	closeAt := strings.IndexByte(s[open:], ']')
	if closeAt < 0 {
		return nil, fmt.Errorf("unbalanced '[' in %q", s)
	}
	closeAt += open
	prefix, body, rest := s[:open], s[open+1:closeAt], s[closeAt+1:]
	if strings.ContainsAny(body, "[") {
		return nil, fmt.Errorf("nested '[' in %q", s)
	}
	suffixes, err := expandHost(rest)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, part := range strings.Split(body, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		if !isRange {
			hi = lo
		}
		a, errA := strconv.Atoi(lo)
		b, errB := strconv.Atoi(hi)
		if lo == "" || hi == "" || errA != nil || errB != nil || a < 0 || b < a {
			return nil, fmt.Errorf("bad range %q in %q", part, s)
		}
		if b-a >= maxExpand || len(out)+(b-a+1)*len(suffixes) > maxExpand {
			return nil, fmt.Errorf("range %q in %q expands to more than %d hosts", part, s, maxExpand)
		}
		width := len(lo) // "01-04" keeps two digits, "1-4" none
		for n := a; n <= b; n++ {
			num := fmt.Sprintf("%0*d", width, n)
			for _, suf := range suffixes {
				out = append(out, prefix+num+suf)
			}
		}
	}
	return out, nil
}

// ParseTasksPerNode expands Slurm's SLURM_TASKS_PER_NODE, such as
// "2(x3),1", into one count per node: [2 2 2 1].
func ParseTasksPerNode(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("empty tasks per node")
	}
	var out []int
	for _, part := range strings.Split(s, ",") {
		count, rep := part, "1"
		if i := strings.IndexByte(part, '('); i >= 0 {
			if !strings.HasPrefix(part[i:], "(x") || !strings.HasSuffix(part, ")") {
				return nil, fmt.Errorf("tasks per node %q: bad repetition %q, want N(xM)", s, part)
			}
			count, rep = part[:i], part[i+2:len(part)-1]
		}
		n, err1 := strconv.Atoi(count)
		r, err2 := strconv.Atoi(rep)
		if err1 != nil || err2 != nil || n < 0 || r < 1 {
			return nil, fmt.Errorf("tasks per node %q: bad entry %q", s, part)
		}
		if len(out)+r > maxExpand {
			return nil, fmt.Errorf("tasks per node %q: more than %d nodes", s, maxExpand)
		}
		for range r {
			out = append(out, n)
		}
	}
	return out, nil
}
