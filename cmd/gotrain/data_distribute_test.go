package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/data/shards"
)

// fakeSSH is an ssh client for `gotrain data distribute` tests: it drops
// ssh's options and runs the command with sh in ROOT/HOST, that host's
// home (the remote dir ~/… lands there).
const fakeSSH = `#!/bin/sh
while [ $# -gt 0 ]; do
	case "$1" in
	-O) exit 0 ;;
	-o) shift 2 ;;
	--) shift; break ;;
	*) break ;;
	esac
done
host=$1; shift
export HOME="$FAKE_SSH_ROOT/$host"
mkdir -p "$HOME" && cd "$HOME" && exec sh -c "$*"
`

// distributeFixture writes a dataset of 5 train shards and 2 val shards
// of 100 uint16 tokens each into dir.
func distributeFixture(t *testing.T, dir string) *shards.Index {
	t.Helper()
	w, err := shards.Create(dir, "bytes", 300, -1, 100)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int, 500)
	for i := range ids {
		ids[i] = (i * 7) % 300
	}
	if err := w.Write(shards.Train, ids); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(shards.Val, ids[:200]); err != nil {
		t.Fatal(err)
	}
	idx, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(idx.Files(shards.Train)) != 5 || len(idx.Files(shards.Val)) != 2 {
		t.Fatalf("fixture: %d train and %d val shards, want 5 and 2", len(idx.Files(shards.Train)), len(idx.Files(shards.Val)))
	}
	return idx
}

// distributeRun runs `gotrain data distribute` with the fake ssh whose
// hosts live under root.
func distributeRun(t *testing.T, root string, args ...string) (string, int) {
	t.Helper()
	ssh := filepath.Join(t.TempDir(), "ssh")
	if err := os.WriteFile(ssh, []byte(fakeSSH), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOTRAIN_SSH", ssh)
	t.Setenv("FAKE_SSH_ROOT", root)
	all, _, code := runGotrain(t, 60*time.Second, append([]string{"data", "distribute"}, args...)...)
	return all, code
}

// hostFiles lists the files of dir on a fake host, temporary ones too.
func hostFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func TestDataDistribute(t *testing.T) {
	src := filepath.Join(t.TempDir(), "tokens")
	idx := distributeFixture(t, src)
	root := t.TempDir()
	all, code := distributeRun(t, root, src, "--hosts", "n0:2,n1:2", "--remote-dir", "~/tokens")
	if code != 0 {
		t.Fatalf("exit code %d:\n%s", code, all)
	}
	// Round-robin within the train split: 0, 2, 4 on n0; val everywhere.
	train, val := idx.Files(shards.Train), idx.Files(shards.Val)
	want := [][]string{
		{train[0], train[2], train[4], val[0], val[1], shards.IndexFile},
		{train[1], train[3], val[0], val[1], shards.IndexFile},
	}
	for i, h := range []string{"n0", "n1"} {
		dir := filepath.Join(root, h, "tokens")
		got := hostFiles(t, dir)
		w := slices.Clone(want[i])
		slices.Sort(w)
		if !slices.Equal(got, w) {
			t.Errorf("%s holds %v, want %v", h, got, w)
		}
		for _, f := range got {
			a, _ := os.ReadFile(filepath.Join(src, f))
			b, _ := os.ReadFile(filepath.Join(dir, f))
			if !bytes.Equal(a, b) {
				t.Errorf("%s: %s differs from the source", h, f)
			}
		}
	}
	if !strings.Contains(all, ": 9 copied") || !strings.Contains(all, "0 already in place") {
		t.Errorf("summary does not say 9 shards copied, 0 in place:\n%s", all)
	}

	// Again: nothing to send. Then a flipped byte on n1 is sent again,
	// and only that file.
	all, code = distributeRun(t, root, src, "--hosts", "n0,n1", "--remote-dir", "~/tokens")
	if code != 0 || !strings.Contains(all, ": 0 copied") || !strings.Contains(all, "9 already in place") {
		t.Fatalf("second run: exit code %d, want nothing sent:\n%s", code, all)
	}
	bad := filepath.Join(root, "n1", "tokens", train[1])
	b, _ := os.ReadFile(bad)
	b[3] ^= 0x10
	os.WriteFile(bad, b, 0o644)
	all, code = distributeRun(t, root, src, "--hosts", "n0,n1", "--remote-dir", "~/tokens")
	if code != 0 || !strings.Contains(all, ": 1 copied") || !strings.Contains(all, "n1: "+train[1]+" sent") {
		t.Fatalf("after corrupting %s on n1: exit code %d, want it alone sent again:\n%s", train[1], code, all)
	}
	if b2, _ := os.ReadFile(bad); !bytes.Equal(b2, mustRead(t, filepath.Join(src, train[1]))) {
		t.Errorf("%s on n1 still differs after the third run", train[1])
	}

	// Two replicas on two hosts: everything everywhere.
	root2 := t.TempDir()
	if all, code := distributeRun(t, root2, src, "--hosts", "n0,n1", "--replicas", "2", "--remote-dir", "~/d"); code != 0 {
		t.Fatalf("--replicas 2: exit code %d:\n%s", code, all)
	}
	for _, h := range []string{"n0", "n1"} {
		if got := hostFiles(t, filepath.Join(root2, h, "d")); len(got) != len(idx.Shards)+1 {
			t.Errorf("--replicas 2: %s holds %v, want all %d shards and the index", h, got, len(idx.Shards))
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDataDistributeCorruptSource: a local shard that does not match
// index.json is named, and no host gets a bad copy.
func TestDataDistributeCorruptSource(t *testing.T) {
	src := filepath.Join(t.TempDir(), "tokens")
	idx := distributeFixture(t, src)
	f := filepath.Join(src, idx.Files(shards.Train)[2])
	b := mustRead(t, f)
	b[0] ^= 1
	os.WriteFile(f, b, 0o644)
	root := t.TempDir()
	all, code := distributeRun(t, root, src, "--hosts", "n0", "--remote-dir", "~/tokens")
	if code != 1 || !strings.Contains(all, f+" does not match its sha256 in index.json") {
		t.Fatalf("exit code %d, want 1 and a line naming %s:\n%s", code, f, all)
	}
	for _, name := range hostFiles(t, filepath.Join(root, "n0", "tokens")) {
		if name == filepath.Base(f) || strings.HasPrefix(name, ".") || name == shards.IndexFile {
			t.Errorf("n0 holds %s after the failed copy", name)
		}
	}
}

func TestDataDistributeUsage(t *testing.T) {
	src := filepath.Join(t.TempDir(), "tokens")
	distributeFixture(t, src)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{src}, "--hosts (or --hostfile) is required"},
		{[]string{src, "--hosts", "a,b", "--replicas", "3"}, "--replicas 3: must be from 1 to the number of hosts, 2"},
		{[]string{src, "--hosts", "a,a"}, "--hosts a,a:"},
		{[]string{src, "--hosts", "a", "--remote-dir", "rel/dir"}, "--remote-dir rel/dir: must be an absolute path"},
		{[]string{src, "--hosts", "a", "--ssh-option", "Port"}, "--ssh-option Port: must be KEY=VALUE"},
		{[]string{"a", "b", "--hosts", "a"}, "want one DIR argument"},
	} {
		all, code := distributeRun(t, t.TempDir(), c.args...)
		if code != 2 || !strings.Contains(all, c.want) || strings.Count(strings.TrimSpace(all), "\n") != 0 {
			t.Errorf("%v: exit code %d, output %q; want 2 and one line containing %q", c.args, code, all, c.want)
		}
	}
	all, code := distributeRun(t, t.TempDir(), t.TempDir(), "--hosts", "a")
	if code != 1 || !strings.Contains(all, "is not a prepared dataset") {
		t.Errorf("a directory without index.json: exit code %d:\n%s", code, all)
	}
}
