package distributed

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestDefaultPortRange: with no range configured, ranks listen in
// 29600-29700, as the README tells firewalls; GOTRAIN_PORT_RANGE and
// Config override it, and only the default falls back when full.
func TestDefaultPortRange(t *testing.T) {
	t.Setenv("GOTRAIN_PORT_RANGE", "")
	c, err := Config{Rank: 0, WorldSize: 1}.resolveFields()
	if err != nil || c.PortMin != 29600 || c.PortMax != 29700 || !c.portFallback {
		t.Fatalf("default: ports %d-%d, fallback %v, %v; want 29600-29700 with fallback", c.PortMin, c.PortMax, c.portFallback, err)
	}
	t.Setenv("GOTRAIN_PORT_RANGE", "31000-31010")
	if c, err = (Config{Rank: 0, WorldSize: 1}).resolveFields(); err != nil || c.PortMin != 31000 || c.PortMax != 31010 || c.portFallback {
		t.Fatalf("GOTRAIN_PORT_RANGE: ports %d-%d, fallback %v, %v; want 31000-31010 without", c.PortMin, c.PortMax, c.portFallback, err)
	}
	t.Setenv("GOTRAIN_PORT_RANGE", "")

	// Each rank publishes a data-plane address in the range.
	runGroup(t, 2, nil, func(ctx context.Context, g *Group) error {
		b, err := g.st.Get(ctx, "addr/"+strconv.Itoa(g.Rank()))
		if err != nil {
			return err
		}
		_, p, _ := net.SplitHostPort(string(b))
		if port, _ := strconv.Atoi(p); port < DefaultPortMin || port > DefaultPortMax {
			return fmt.Errorf("rank %d listens on %s, outside %d-%d", g.Rank(), b, DefaultPortMin, DefaultPortMax)
		}
		return nil
	})
}

// TestDefaultPortRangeFull: when every port of the default range is
// taken, the group still forms on other ports, and each rank logs it. The
// default range here is one of the test's own, which it fills, so that
// other tests and programs on the machine keep the real one.
func TestDefaultPortRangeFull(t *testing.T) {
	t.Setenv("GOTRAIN_PORT_RANGE", "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	old := defaultPorts
	defaultPorts = [2]int{port, port}
	t.Cleanup(func() { defaultPorts = old })
	var mu sync.Mutex
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&lockedWriter{mu: &mu, w: &logs}, nil))
	runGroup(t, 2, func(c *Config) { c.Logger = log }, func(ctx context.Context, g *Group) error {
		return g.Barrier(ctx)
	})
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logs.String(), "data-plane port range taken"); n != 2 {
		t.Errorf("%d warnings of a full port range, want one per rank; logs:\n%s", n, logs.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
