package launch_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testproc"
	"github.com/gotrain/gotrain/launch"
	"github.com/gotrain/gotrain/launch/rendezvous"
)

// elasticNode is one node's launch.Run of an elastic job over a shared
// in-memory rendezvous.
type elasticNode struct {
	mu       sync.Mutex // guards out and log while the node runs
	out, log bytes.Buffer
	code     int
	err      error
}

// printed reports whether the node's workers have printed s.
func (n *elasticNode) printed(s string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return strings.Contains(n.out.String(), s)
}

// runElasticNodes runs len(after) nodes of the shell script and waits for
// all of them. Node i starts at once if after[i] is "", else once an
// earlier node's workers have printed after[i].
func runElasticNodes(t *testing.T, minN, maxN, maxRestarts int, script string, after []string) []*elasticNode {
	t.Helper()
	b := rendezvous.NewMemBackend()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	env := append(os.Environ(), "GOTRAIN_TOKEN=00112233445566778899aabbccddeeff", launch.EnvAllowLoopback+"=1")
	nodes := make([]*elasticNode, len(after))
	for i := range nodes {
		nodes[i] = &elasticNode{}
	}
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			if after[i] != "" && !testproc.Poll(60*time.Second, func() bool {
				return slices.ContainsFunc(nodes[:i], func(m *elasticNode) bool { return m.printed(after[i]) })
			}) {
				n.code, n.err = 1, errors.New("never started: no node printed "+after[i])
				return
			}
			rz, err := rendezvous.New(ctx, b, rendezvous.Config{
				RunID: "elastic-test", Addr: "127.0.0.1", MinNodes: minN, MaxNodes: maxN,
				LastCall: 100 * time.Millisecond, HeartbeatInterval: 20 * time.Millisecond,
				DeadAfter: 500 * time.Millisecond, PollInterval: 10 * time.Millisecond,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			})
			if err != nil {
				n.code, n.err = 1, err
				return
			}
			defer rz.Close()
			lw := &lockedBuf{mu: &n.mu, b: &n.log}
			n.code, n.err = launch.Run(ctx, launch.Config{
				Program: "sh", Args: []string{"-c", script}, Env: env,
				Rendezvous: rz, RunID: "elastic-test", MaxRestarts: maxRestarts, RestartBackoff: 50 * time.Millisecond,
				MonitorInterval: 10 * time.Millisecond, StopTimeout: time.Second,
				Stdout: &lockedBuf{mu: &n.mu, b: &n.out}, Stderr: lw,
				Logger: slog.New(slog.NewTextHandler(lw, nil)),
			})
		})
	}
	wg.Wait()
	return nodes
}

type lockedBuf struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func outputs(nodes []*elasticNode) string {
	var s strings.Builder
	for i, n := range nodes {
		s.WriteString("--- node " + string(rune('a'+i)) + ":\n" + n.out.String() + n.log.String())
	}
	return s.String()
}

// Two nodes get dense ranks of one world of 2 from the rendezvous, with
// node rank 0's address as the master.
func TestElasticPlacesWorkers(t *testing.T) {
	nodes := runElasticNodes(t, 2, 2, 0, `echo "place $RANK/$WORLD_SIZE/$GROUP_RANK/$GROUP_WORLD_SIZE/$TORCHELASTIC_RESTART_COUNT $MASTER_ADDR"`, []string{"", ""})
	var places []string
	for _, n := range nodes {
		if n.code != 0 || n.err != nil {
			t.Fatalf("a node exited %d, %v:\n%s", n.code, n.err, outputs(nodes))
		}
		_, p, _ := strings.Cut(n.out.String(), "place ")
		places = append(places, strings.TrimSpace(p))
	}
	slices.Sort(places)
	if want := []string{"0/2/0/2/0 127.0.0.1", "1/2/1/2/0 127.0.0.1"}; !slices.Equal(places, want) {
		t.Fatalf("workers' places %q; want %q:\n%s", places, want, outputs(nodes))
	}
}

// A node that arrives while the group of 2 runs makes it re-form as 3,
// without counting a restart; the workers of the world of 3 finish.
func TestElasticGrowsOnArrival(t *testing.T) {
	script := `if [ "$WORLD_SIZE" = 3 ]; then echo "done $RANK restarts=$TORCHELASTIC_RESTART_COUNT"; exit 0; fi; echo "world of $WORLD_SIZE runs"; exec sleep 30`
	nodes := runElasticNodes(t, 2, 3, 0, script, []string{"", "", "world of 2 runs"})
	for _, n := range nodes {
		if n.code != 0 || n.err != nil || !strings.Contains(n.out.String(), "restarts=0") {
			t.Fatalf("a node exited %d, %v, or its world of 3 did not finish with no restart:\n%s", n.code, n.err, outputs(nodes))
		}
	}
}

// Workers that keep failing use up --max-restarts for the group: two
// rounds (restart 0 and 1), then the job fails with the worker's code.
func TestElasticMaxRestarts(t *testing.T) {
	nodes := runElasticNodes(t, 2, 2, 1, `exit 3`, []string{"", ""})
	reported, waited := false, false
	for _, n := range nodes {
		if n.code == 0 {
			t.Fatalf("a node succeeded with failing workers:\n%s", outputs(nodes))
		}
		if strings.Contains(n.log.String(), "round=2") {
			t.Fatalf("a third round started with --max-restarts 1:\n%s", outputs(nodes))
		}
		reported = reported || n.code == 3 && strings.Contains(n.log.String(), "exit status 3")
		waited = waited || strings.Contains(n.log.String(), "re-forming the group in 50ms (restart 1 of 1)")
	}
	if !waited {
		t.Fatalf("no node logged its wait before re-joining:\n%s", outputs(nodes))
	}
	if !reported {
		t.Fatalf("no node reported its worker's exit status 3:\n%s", outputs(nodes))
	}
}
