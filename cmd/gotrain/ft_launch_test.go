package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testnet"
)

// The fault-tolerance flags of `gotrain run` and `gotrain train` refuse
// what does not go together with one line and exit status 2.
func TestFTRunBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--min-replicas", "2", "true"}, "--min-replicas: needs --ft"},
		{[]string{"run", "--ft", "--min-replicas", "-1", "true"}, "--min-replicas"},
		{[]string{"run", "--ft", "--nproc-per-node", "2", "--min-replicas", "3", "true"}, "more than the 2 workers"},
		{[]string{"run", "--ft-join", "true"}, "--ft-join: needs --ft"},
		{[]string{"run", "--ft", "--nnodes", "1:2", "--rdzv-endpoint", "127.0.0.1:1", "--rdzv-id", "x", "true"}, "--ft: does not combine with an elastic rendezvous"},
		{[]string{"train", "mnist", "--min-replicas", "2"}, "--min-replicas: needs --ft"},
		{[]string{"train", "mnist", "--ft", "--diloco", "4", "--diloco-delay", "1"}, "--ft and --diloco-delay 1"},
		{[]string{"train", "mnist", "--ft", "--sharding", "zero1"}, "--ft and --sharding zero1"},
		{[]string{"train", "mnist", "--ft", "--on-nan", "skip"}, "--ft and --on-nan skip"},
	} {
		all, _, code := runGotrain(t, 30*time.Second, tc.args...)
		out := strings.TrimSuffix(all, "\n")
		if code != 2 || strings.Contains(out, "\n") || !strings.Contains(out, tc.want) {
			t.Errorf("gotrain %s: exit %d, output %q; want 2 and one line with %q", strings.Join(tc.args, " "), code, all, tc.want)
		}
	}
}

func TestFTImpliedByTheJob(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"gotrain", "train", "mnist", "--ft"}, true},
		{[]string{"gotrain", "train", "gpt", "--epochs", "2", "--ft=true"}, true},
		{[]string{"gotrain", "train", "mnist"}, false},
		{[]string{"gotrain", "bench", "--ft"}, false},
		{[]string{"gotrain", "train", "mnist", "--", "--ft"}, false},
		{[]string{"./trainer", "--ft"}, false},
	} {
		if got := jobWantsFT(tc.args); got != tc.want {
			t.Errorf("jobWantsFT(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

// Under `gotrain run --ft` a worker that dies is restarted alone, as a
// joining replica with the same replica ID, while its peer runs on.
func TestFTRunRestartsOneWorker(t *testing.T) {
	dir := t.TempDir()
	// Each start appends "rank pid join id" to starts; rank 1's first
	// start kills itself; rank 0 waits for rank 1's second start.
	script := fmt.Sprintf(`f=%s/starts
echo "$RANK $$ ${GOTRAIN_FT_JOIN:-0} $GOTRAIN_FT_REPLICA_ID" >> $f
if [ "$RANK" = 1 ] && [ ! -e %[1]s/died ]; then touch %[1]s/died; kill -9 $$; fi
if [ "$RANK" = 0 ]; then
  i=0; while [ $(grep -c '^1 ' $f) -lt 2 ]; do i=$((i+1)); [ $i -gt 6000 ] && exit 7; sleep 0.01; done
fi
exit 0`, dir)
	all, _, code := runGotrain(t, time.Minute, "run", "--ft", "--nproc-per-node", "2", "--max-restarts", "1",
		"--restart-backoff", "0", "--master-port", strconv.Itoa(testnet.FreePort(t)), "sh", "-c", script)
	if code != 0 {
		t.Fatalf("exit %d; output:\n%s", code, all)
	}
	data, err := os.ReadFile(filepath.Join(dir, "starts"))
	if err != nil {
		t.Fatal(err)
	}
	var starts [2][]string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 || (f[0] != "0" && f[0] != "1") {
			t.Fatalf("start record %q", line)
		}
		r := int(f[0][0] - '0')
		starts[r] = append(starts[r], line)
	}
	if len(starts[0]) != 1 || len(starts[1]) != 2 {
		t.Fatalf("starts: rank 0 %q, rank 1 %q; want rank 0 once (it ran on), rank 1 twice", starts[0], starts[1])
	}
	first, again := strings.Fields(starts[1][0]), strings.Fields(starts[1][1])
	if first[2] != "0" || again[2] != "1" || first[3] != again[3] || !strings.HasSuffix(first[3], "-001") {
		t.Errorf("rank 1's starts %q then %q: want join 0 then 1 with the same replica ID ending -001", starts[1][0], starts[1][1])
	}
	if !strings.Contains(all, "restarting it in") || !strings.Contains(all, "the other 1 go on") {
		t.Errorf("the launcher does not say it restarts the worker while the other goes on:\n%s", all)
	}
}

// `gotrain train --ft` outside a launcher says, in one line, what it needs.
func TestFTTrainNeedsLauncher(t *testing.T) {
	all, _, code := runGotrain(t, 30*time.Second, "train", "mnist", "--ft", "--max-steps", "2", "--progress=false")
	out := strings.TrimSuffix(all, "\n")
	if code == 0 || strings.Contains(out, "\n") || !strings.Contains(out, "needs its launcher") {
		t.Errorf("exit %d, output %q; want a failure in one line saying it needs its launcher", code, all)
	}
}
