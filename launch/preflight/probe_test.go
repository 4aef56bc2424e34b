package preflight

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// silentListener listens on loopback and holds the first silent
// connections it accepts open without a word (as a greeting lost on the
// way looks to the dialer), then greets every later one as node 1.
func silentListener(t *testing.T, silent int) (net.IP, int) {
	t.Helper()
	var mu sync.Mutex // guards held
	var held []net.Conn
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	n := 0
	return listenLoopback(t, func(c net.Conn) {
		mu.Lock()
		n++
		if n <= silent {
			held = append(held, c)
			mu.Unlock()
			return
		}
		mu.Unlock()
		c.Write([]byte(greetingFor("tok", 1)))
		c.Close()
	})
}

// TestProbePortRetries: a port whose first two probes go unanswered is
// reachable, with two of its three probes counted lost.
func TestProbePortRetries(t *testing.T) {
	ip, port := silentListener(t, 2)
	r := probePort(context.Background(), ip, port, 200*time.Millisecond, "tok", []int{1}, false)
	if r.kind != "" || r.probes != 3 || r.lost != 2 {
		t.Fatalf("probes %d, lost %d, failure %q (%s); want 3 probes, 2 lost, no failure", r.probes, r.lost, r.kind, r.detail)
	}
}

// TestProbePortAllLost: a port that never answers fails as timed out
// after maxProbes probes, within the bound their timeouts and backoffs
// add up to.
func TestProbePortAllLost(t *testing.T) {
	ip, port := silentListener(t, 1000)
	start := time.Now()
	r := probePort(context.Background(), ip, port, 100*time.Millisecond, "tok", []int{1}, false)
	if r.kind != kindTimeout || r.probes != maxProbes || r.lost != maxProbes {
		t.Fatalf("probes %d, lost %d, failure %q (%s); want %d probes lost, timed out", r.probes, r.lost, r.kind, r.detail, maxProbes)
	}
	// 5 probes of at most 100ms each, backoffs of 50+100+200+400ms.
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("took %v", d)
	}
}

// TestProbeBudget: the budget ends the probes of a port that never
// answers, and says so.
func TestProbeBudget(t *testing.T) {
	ip, port := silentListener(t, 1000)
	rep := dialAll(context.Background(), request{Token: "tok", Node: 0},
		dialRequest{TimeoutMS: 5000, BudgetMS: 300, Targets: []target{{Node: 1, Addr: ip.String(), Ports: []int{port}, Accept: []int{0, 1}}}})
	if len(rep.Failures) != 1 || rep.Failures[0].Kind != kindTimeout || !rep.Failures[0].Deadline {
		t.Fatalf("failures %+v; want one timeout at the budget's end", rep.Failures)
	}
}

// TestDialAllCountsLoss: the report counts the probes sent to a target
// and those lost, with the ports that lost any.
func TestDialAllCountsLoss(t *testing.T) {
	ip, lossy := silentListener(t, 1)
	_, clean := silentListener(t, 0)
	rep := dialAll(context.Background(), request{Token: "tok", Node: 0},
		dialRequest{TimeoutMS: 200, Targets: []target{{Node: 1, Addr: ip.String(), Ports: []int{lossy, clean}, Accept: []int{0, 1}}}})
	if len(rep.Failures) != 0 {
		t.Fatalf("failures %+v; want none", rep.Failures)
	}
	if len(rep.Links) != 1 || rep.Links[0].Probes != 3 || rep.Links[0].Lost != 1 || len(rep.Links[0].LostPorts) != 1 || rep.Links[0].LostPorts[0] != lossy {
		t.Fatalf("links %+v; want node 1: 3 probes, 1 lost on port %d", rep.Links, lossy)
	}
}

// TestJudgeDialsLossWarns: probes lost on the way to ports that answered
// in the end are a warning with the measured rate, not a failure.
func TestJudgeDialsLossWarns(t *testing.T) {
	var logged bytes.Buffer
	p, err := Plan{
		Hosts:      []Host{{Name: "node0", Addr: "10.0.0.1", Workers: 1}, {Name: "node1", Addr: "10.0.0.2", Workers: 1}},
		MasterPort: 29500, PortMin: 29600, PortMax: 29700,
		Logger: slog.New(slog.NewTextHandler(&logged, nil)),
	}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	c := &checker{plan: p}
	c.judgeDials(1, dialReport{Dialed: 20, Links: []linkStats{{Node: 0, Probes: 20, Lost: 2, LostPorts: []int{29500, 29601}}}})
	if len(c.failures) != 0 {
		t.Fatalf("failures %+v; want none", c.failures)
	}
	want := "host node1 → host node0 (10.0.0.1): 2 of 20 probes lost (10.0%) on rendezvous port 29500 and data-plane port 29601"
	if len(c.warnings) != 1 || !strings.Contains(c.warnings[0], want) || !strings.Contains(c.warnings[0], "the job goes on") {
		t.Fatalf("warnings %q; want one with %q", c.warnings, want)
	}
	if !strings.Contains(logged.String(), "level=WARN") || !strings.Contains(logged.String(), "2 of 20 probes lost (10.0%)") {
		t.Errorf("logged %q; want the warning", logged.String())
	}
}

// TestCheckNotGotrain: a --remote-gotrain that is not gotrain, or that
// crashes, is named with what it did: its exit status, what it wrote,
// the line that says why it ended.
func TestCheckNotGotrain(t *testing.T) {
	dir := t.TempDir()
	script := func(name, body string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}
	notExec := filepath.Join(dir, "other-arch")
	if err := os.WriteFile(notExec, []byte("\x7fELF\x02\x01\x01garbage that is no program"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, gotrain string
		want          []string
	}{
		{"true", "/bin/true", []string{"host node0: /bin/true preflight-node exited with status 0 without answering (it wrote nothing on stdout)", "is it gotrain"}},
		{"garbage", script("garbage", "echo 'hello, world'"), []string{"preflight-node exited with status 0 without answering (it wrote \"hello, world\\n\" instead of an answer)"}},
		{"garbage and failure", script("fails", "echo 'usage: something else'; exit 3"), []string{"failed (exit status 3: it wrote \"usage: something else\\n\" instead of an answer)"}},
		{"crash", script("crash", "printf 'panic: runtime error: index out of range\\n\\ngoroutine 1 [running]:\\nmain.main()\\n' >&2; exit 2"), []string{"crashed (exit status 2: panic: runtime error: index out of range; it wrote nothing on stdout)"}},
		{"exec format", notExec, []string{"gotrain not executable", "xec format error"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			p := testPlan(t, "node0")
			p.Gotrain = tc.gotrain
			wantLines(t, lines(t, Check(context.Background(), c.ssh, p)), tc.want)
		})
	}
}
