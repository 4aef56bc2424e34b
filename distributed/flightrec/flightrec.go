// Package flightrec reads the flight-recorder dumps of a job's ranks
// (distributed.FlightDump files) and says where the job stopped: which
// ranks never reached the collective the others wait in, where each rank
// was last seen, and ranks that disagree on what a collective is.
package flightrec

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gotrain/gotrain/distributed"
)

// Load reads every flight_rank*.json in dir.
func Load(dir string) ([]distributed.FlightDump, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "flight_rank*.json"))
	if err != nil {
		return nil, fmt.Errorf("flightrec: %w", err)
	}
	if len(paths) == 0 {
		if _, err := os.Stat(dir); err != nil {
			return nil, fmt.Errorf("flightrec: %w", err)
		}
		return nil, fmt.Errorf("flightrec: no flight_rank*.json dumps in %s", dir)
	}
	var dumps []distributed.FlightDump
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("flightrec: %w", err)
		}
		var d distributed.FlightDump
		if err := json.Unmarshal(b, &d); err != nil {
			return nil, fmt.Errorf("flightrec: %s is not a flight-recorder dump: %w", p, err)
		}
		if d.World < 1 || d.Rank < 0 || d.Rank >= d.World {
			return nil, fmt.Errorf("flightrec: %s: rank %d of world %d is not a rank", p, d.Rank, d.World)
		}
		dumps = append(dumps, d)
	}
	slices.SortFunc(dumps, func(a, b distributed.FlightDump) int { return a.Rank - b.Rank })
	return dumps, nil
}

// Finding is one sentence of the analysis.
type Finding struct {
	// Missing are the ranks that never entered Op #Seq (as far as the
	// dumps show); Waiting those that entered it and did not complete.
	Missing, Waiting []int
	Group            string
	Op               string
	Seq              uint64
	Text             string
}

// Analyze says, for each group in the dumps, which collective the job
// stopped in and who did not reach it, and where every rank was last
// seen. It returns the findings (the culprits first) and the report's
// lines.
func Analyze(dumps []distributed.FlightDump) ([]Finding, []string) {
	if len(dumps) == 0 {
		return nil, []string{"no dumps"}
	}
	world := 0
	have := map[int]distributed.FlightDump{}
	for _, d := range dumps {
		world = max(world, d.World)
		have[d.Rank] = d
	}
	var lines []string
	var missingDump []int
	for r := range world {
		if _, ok := have[r]; !ok {
			missingDump = append(missingDump, r)
		}
	}
	head := fmt.Sprintf("world %d: dumps from %s", world, ranks(keys(have)))
	if len(missingDump) > 0 {
		head += fmt.Sprintf("; none from %s (stopped, hung or dead: a rank dumps on a failed operation or SIGUSR1 to the launcher)", ranks(missingDump))
	}
	lines = append(lines, head)

	groups := map[string]bool{}
	for _, d := range dumps {
		for _, rec := range d.Records {
			groups[rec.Group] = true
		}
	}
	names := keys(groups)
	sort.Strings(names)
	var findings []Finding
	for _, g := range names {
		f, ls := analyzeGroup(g, world, have, missingDump)
		findings = append(findings, f...)
		lines = append(lines, ls...)
	}
	lines = append(lines, lastSeen(world, have)...)
	return findings, lines
}

// analyzeGroup finds the furthest collective of group g any rank entered
// and who did not get there.
func analyzeGroup(g string, world int, have map[int]distributed.FlightDump, missingDump []int) ([]Finding, []string) {
	type at struct {
		rec distributed.CollectiveRecord
		ok  bool
	}
	last := map[int]at{}
	var top distributed.CollectiveRecord
	found := false
	for r, d := range have {
		for _, rec := range d.Records {
			if rec.Group != g {
				continue
			}
			if l := last[r]; !l.ok || rec.Seq >= l.rec.Seq {
				last[r] = at{rec, true}
			}
			if !found || rec.Seq > top.Seq {
				top, found = rec, true
			}
		}
	}
	if !found {
		return nil, nil
	}
	gname := "default group"
	if g != "" {
		gname = "group " + strconv.Quote(g)
	}
	var lines []string
	// Ranks that disagree on what operation top.Seq is.
	var disagree []string
	for r := range world {
		d, ok := have[r]
		if !ok {
			continue
		}
		for _, rec := range d.Records {
			if rec.Group == g && rec.Seq == top.Seq && (rec.Op != top.Op || rec.Count != top.Count || rec.DType != top.DType || rec.Root != top.Root) {
				disagree = append(disagree, fmt.Sprintf("rank %d ran %s", r, describe(rec)))
			}
		}
	}
	if len(disagree) > 0 {
		lines = append(lines, fmt.Sprintf("%s: ranks disagree on #%d: one ran %s, but %s", gname, top.Seq, describe(top), strings.Join(disagree, ", ")))
	}

	var missing, waiting, completed []int
	var maxWait time.Duration
	var failedPeer []string
	for r := range world {
		l, ok := last[r]
		if _, dumped := have[r]; !dumped {
			missing = append(missing, r)
			continue
		}
		if !ok || l.rec.Seq < top.Seq {
			missing = append(missing, r)
			continue
		}
		rec := l.rec
		switch rec.State {
		case distributed.StateCompleted:
			completed = append(completed, r)
			continue
		}
		waiting = append(waiting, r)
		end := rec.End
		if end == 0 {
			end = have[r].Time
		}
		maxWait = max(maxWait, time.Duration(end-rec.Start))
		if rec.State == distributed.StateFailed && rec.Peer >= 0 {
			failedPeer = append(failedPeer, fmt.Sprintf("rank %d's failed waiting for rank %d", r, rec.Peer))
		}
	}
	if len(missing) == 0 && len(waiting) == 0 {
		return nil, append(lines, fmt.Sprintf("%s: every rank completed %s #%d, its last", gname, top.Op, top.Seq))
	}
	var parts []string
	for _, r := range missing {
		why := ""
		if slices.Contains(missingDump, r) {
			why = " (it left no dump)"
		} else if l, ok := last[r]; ok {
			why = fmt.Sprintf(" (its last: %s #%d, %s)", l.rec.Op, l.rec.Seq, l.rec.State)
		} else {
			why = " (it ran none in this group)"
		}
		parts = append(parts, fmt.Sprintf("rank %d never entered %s #%d%s", r, top.Op, top.Seq, why))
	}
	text := strings.Join(parts, "; ")
	if len(waiting) > 0 {
		w := fmt.Sprintf("%s waited %s", ranks(waiting), maxWait.Round(100*time.Millisecond))
		if len(missing) == 0 {
			w = fmt.Sprintf("%s entered %s #%d and did not complete it; %s", ranks(waiting), top.Op, top.Seq, w)
		}
		if text != "" {
			text += "; "
		}
		text += w
		if len(failedPeer) > 0 {
			text += " (" + strings.Join(failedPeer, ", ") + ")"
		}
	}
	if len(completed) > 0 {
		text += fmt.Sprintf("; %s completed it", ranks(completed))
	}
	lines = append(lines, gname+": "+text)
	return []Finding{{Missing: missing, Waiting: waiting, Group: g, Op: top.Op, Seq: top.Seq, Text: text}}, lines
}

// lastSeen is a line per dumped rank: its last operation and how long
// before its dump it started.
func lastSeen(world int, have map[int]distributed.FlightDump) []string {
	var lines []string
	for r := range world {
		d, ok := have[r]
		if !ok {
			continue
		}
		line := fmt.Sprintf("rank %d (%s, pid %d, dumped on %s): ", r, d.Host, d.PID, d.Reason)
		if len(d.Records) == 0 {
			lines = append(lines, line+"no collectives recorded")
			continue
		}
		rec := d.Records[0]
		for _, x := range d.Records {
			if x.Start > rec.Start {
				rec = x
			}
		}
		line += fmt.Sprintf("last seen in %s #%d %s, started %s before the dump", describe(rec), rec.Seq, rec.State,
			time.Duration(d.Time-rec.Start).Round(time.Millisecond))
		lines = append(lines, line)
	}
	return lines
}

func describe(r distributed.CollectiveRecord) string {
	s := fmt.Sprintf("%s (%s×%d", r.Op, r.DType, r.Count)
	if r.Root >= 0 {
		s += fmt.Sprintf(", root %d", r.Root)
	}
	return s + ")"
}

// ranks names a set of ranks: "rank 1", "ranks 0, 2, 3".
func ranks(rs []int) string {
	slices.Sort(rs)
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = strconv.Itoa(r)
	}
	if len(rs) == 1 {
		return "rank " + s[0]
	}
	return "ranks " + strings.Join(s, ", ")
}

func keys[K comparable, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
