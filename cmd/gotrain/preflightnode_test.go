package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testlog"
	"github.com/gotrain/gotrain/internal/testnet"
)

// preflightNode runs `gotrain preflight-node` with stdin and returns its
// stdout, stderr and exit code.
func preflightNode(t *testing.T, stdin string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := gotrainCmd(ctx, t, "preflight-node")
	var out, errOut testlog.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &out, &errOut
	cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("gotrain preflight-node still running after 30s")
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

// TestPreflightNode: the hidden command answers a request with this
// build's hash and the ports it held, and exits at the end of its input.
func TestPreflightNode(t *testing.T) {
	port := testnet.FreePort(t)
	stdout, stderr, code := preflightNode(t, fmt.Sprintf(`{"token":"t","node":1,"workers":1,"world_size":2,"port_min":%d,"port_max":%d}`+"\n", port, port))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var p struct {
		Build struct{ SHA256 string }
		Held  []int
	}
	if err := json.Unmarshal([]byte(stdout), &p); err != nil {
		t.Fatalf("answer %q: %v", stdout, err)
	}
	exe, _ := os.Executable()
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(b)
	if p.Build.SHA256 != hex.EncodeToString(h[:]) || len(p.Held) != 1 || p.Held[0] != port {
		t.Fatalf("answer %s; want this binary's sha256 and port %d held", stdout, port)
	}
}

// TestPreflightNodeBadRequest: a malformed request is one line and
// status 1.
func TestPreflightNodeBadRequest(t *testing.T) {
	_, stderr, code := preflightNode(t, "not json\n")
	if code != 1 || strings.Count(strings.TrimSpace(stderr), "\n") != 0 || !strings.Contains(stderr, "gotrain: preflight-node: read the request") {
		t.Fatalf("exit %d, stderr %q; want 1 and one line about the request", code, stderr)
	}
}
