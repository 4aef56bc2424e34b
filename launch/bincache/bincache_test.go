package bincache_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gotrain/gotrain/launch/bincache"
	"github.com/gotrain/gotrain/launch/ssh"
)

// fakeSSH runs the command here, as host: with $FAKE_SSH_DIR/HOST as
// HOME (not created: a host's cache may not exist yet), printing a
// greeting first as some hosts' shell start-up files do, and failing as
// ssh does for the host named down.
const fakeSSH = `#!/bin/sh
while [ $# -gt 0 ]; do
  case "$1" in
  --) shift; break ;;
  -o) shift 2 ;;
  *) shift ;;
  esac
done
if [ "$1" = down ]; then echo "ssh: connect to host down port 22: Connection refused" >&2; exit 255; fi
HOME="$FAKE_SSH_DIR/$1"
echo "Welcome to $1"
export HOME
exec sh -c "$2"
`

// counting is a Runner that counts the sessions that carry input (the
// transfers), and can corrupt what it carries.
type counting struct {
	r         bincache.Runner
	mu        sync.Mutex // guards transfers
	transfers int
	corrupt   bool
}

func (c *counting) Run(ctx context.Context, host string, stdin io.Reader, argv ...string) ([]byte, error) {
	if stdin != nil {
		c.mu.Lock()
		c.transfers++
		c.mu.Unlock()
		if c.corrupt {
			b, err := io.ReadAll(stdin)
			if err != nil {
				return nil, err
			}
			b[len(b)/2] ^= 0xff
			stdin = bytes.NewReader(b)
		}
	}
	return c.r.Run(ctx, host, stdin, argv...)
}

func (c *counting) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.transfers
}

// setup returns a counting fake-ssh Runner, the directory of its hosts'
// homes, and a local file to place.
func setup(t *testing.T) (*counting, string, string) {
	t.Helper()
	dir := t.TempDir()
	prog := filepath.Join(dir, "ssh")
	if err := os.WriteFile(prog, []byte(fakeSSH), 0o755); err != nil {
		t.Fatal(err)
	}
	homes := filepath.Join(dir, "homes")
	if err := os.Mkdir(homes, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FAKE_SSH_DIR", homes)
	local := filepath.Join(dir, "trainer")
	content := bytes.Repeat([]byte("a program's bytes "), 100000) // 1.8 MB: more than one pipe buffer
	if err := os.WriteFile(local, content, 0o755); err != nil {
		t.Fatal(err)
	}
	return &counting{r: ssh.Client{Program: prog}}, homes, local
}

func sum(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// TestEnsureTransfersOnce: the first Ensure copies the file into a cache
// that did not exist, executable, at its content's address; the second
// finds it and transfers nothing.
func TestEnsureTransfersOnce(t *testing.T) {
	r, homes, local := setup(t)
	ctx := context.Background()
	path, err := bincache.Ensure(ctx, r, "node1", local)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(homes, "node1", bincache.Dir, sum(t, local), "trainer")
	if path != want {
		t.Fatalf("path %s; want %s", path, want)
	}
	if sum(t, path) != sum(t, local) {
		t.Fatal("the copy differs")
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm()&0o100 == 0 {
		t.Fatalf("copy not executable: %v %v", st.Mode(), err)
	}
	if again, err := bincache.Ensure(ctx, r, "node1", local); err != nil || again != path {
		t.Fatalf("second Ensure = %s, %v", again, err)
	}
	if n := r.count(); n != 1 {
		t.Fatalf("%d transfers; want 1", n)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*")); len(left) != 0 {
		t.Fatalf("temporary files left: %q", left)
	}
}

// TestEnsureReplacesCorruptedEntry: a cached copy whose bytes no longer
// hash to its address is copied again.
func TestEnsureReplacesCorruptedEntry(t *testing.T) {
	r, _, local := setup(t)
	ctx := context.Background()
	path, err := bincache.Ensure(ctx, r, "node1", local)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("truncated"), 0o700); err != nil {
		t.Fatal(err)
	}
	if again, err := bincache.Ensure(ctx, r, "node1", local); err != nil || again != path {
		t.Fatalf("Ensure after corruption = %s, %v", again, err)
	}
	if n := r.count(); n != 2 {
		t.Fatalf("%d transfers; want 2 (the corrupted copy replaced)", n)
	}
	if sum(t, path) != sum(t, local) {
		t.Fatal("the corrupted copy was kept")
	}
}

// TestEnsureRefusesCorruptTransfer: bytes that arrive changed are
// refused on the host, and leave nothing in the cache.
func TestEnsureRefusesCorruptTransfer(t *testing.T) {
	r, homes, local := setup(t)
	r.corrupt = true
	_, err := bincache.Ensure(context.Background(), r, "node1", local)
	if !errors.Is(err, bincache.ErrCorrupt) || !strings.Contains(err.Error(), "host node1") || !strings.Contains(err.Error(), sum(t, local)) {
		t.Fatalf("err = %v; want ErrCorrupt naming the host and hash", err)
	}
	entries, _ := filepath.Glob(filepath.Join(homes, "node1", bincache.Dir, sum(t, local), "*"))
	hidden, _ := filepath.Glob(filepath.Join(homes, "node1", bincache.Dir, sum(t, local), ".*"))
	if len(entries)+len(hidden) != 0 {
		t.Fatalf("left in the cache: %q %q", entries, hidden)
	}
}

// TestEnsureAll: every host at once, one transfer each; a host that
// fails is one line naming it, the others still get their copy.
func TestEnsureAll(t *testing.T) {
	r, homes, local := setup(t)
	hosts := []string{"node0", "down", "node2"}
	paths, err := bincache.EnsureAll(context.Background(), r, hosts, local)
	if err == nil || strings.Count(err.Error(), "\n") != 0 || !strings.Contains(err.Error(), "host down: ssh: unreachable") {
		t.Fatalf("err = %v; want one line for host down", err)
	}
	for i, h := range hosts {
		if h == "down" {
			if paths[i] != "" {
				t.Errorf("path for down: %q", paths[i])
			}
			continue
		}
		if want := filepath.Join(homes, h, bincache.Dir, sum(t, local), "trainer"); paths[i] != want {
			t.Errorf("path for %s: %q; want %q", h, paths[i], want)
		}
	}
	if n := r.count(); n != 2 {
		t.Fatalf("%d transfers; want 2", n)
	}
}

// elfFile writes a minimal 64-bit little-endian ELF executable header
// with one program header of type typ, and entry point entry.
func elfFile(t *testing.T, typ uint16, entry uint64, progType uint32) string {
	t.Helper()
	var b bytes.Buffer
	b.Write([]byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0})
	b.Write(make([]byte, 8))
	le := binary.LittleEndian
	for _, v := range []any{typ, uint16(62), uint32(1), entry, uint64(64), uint64(0), uint32(0), uint16(64), uint16(56), uint16(1), uint16(64), uint16(0), uint16(0)} {
		binary.Write(&b, le, v)
	}
	// One program header: type, flags, offset, vaddr, paddr, filesz, memsz, align.
	for _, v := range []any{progType, uint32(5), uint64(0), uint64(0x400000), uint64(0x400000), uint64(120), uint64(120), uint64(0x1000)} {
		binary.Write(&b, le, v)
	}
	path := filepath.Join(t.TempDir(), "elf")
	if err := os.WriteFile(path, b.Bytes(), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestStatic: static executables (ET_EXEC, or PIE with an entry point,
// without an interpreter) are what --copy carries; dynamic ones, shared
// libraries and scripts are not.
func TestStatic(t *testing.T) {
	const load, interp = 1, 3
	script := filepath.Join(t.TempDir(), "run.sh")
	os.WriteFile(script, []byte("#!/bin/sh\necho hi\n"), 0o755)
	for _, tc := range []struct {
		name, path string
		want       bool
	}{
		{"static", elfFile(t, 2, 0x401000, load), true},
		{"static-pie", elfFile(t, 3, 0x1000, load), true},
		{"dynamic", elfFile(t, 2, 0x401000, interp), false},
		{"shared library", elfFile(t, 3, 0, load), false},
		{"script", script, false},
	} {
		got, err := bincache.Static(tc.path)
		if err != nil || got != tc.want {
			t.Errorf("%s: Static = %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
	if sh, err := exec.LookPath("sh"); err == nil {
		if got, err := bincache.Static(sh); err != nil || got {
			t.Errorf("Static(%s) = %v, %v; want false (dynamically linked)", sh, got, err)
		}
	}
	if _, err := bincache.Static(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("Static of a missing file: no error")
	}
}

// TestStageCommitDiscard: Stage leaves an executable copy beside the
// final name, not at it; Commit moves it there; a discarded one is gone.
func TestStageCommitDiscard(t *testing.T) {
	r, homes, local := setup(t)
	ctx := context.Background()
	f, err := bincache.Stat(local)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(homes, "node1", bincache.Dir, f.SHA256)
	staged, err := bincache.Stage(ctx, r, "node1", f)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(staged) != dir || !strings.HasPrefix(filepath.Base(staged), ".trainer.") {
		t.Fatalf("staged at %s; want a temporary file in %s", staged, dir)
	}
	if st, err := os.Stat(staged); err != nil || st.Mode().Perm()&0o100 == 0 || sum(t, staged) != f.SHA256 {
		t.Fatalf("staged copy %v, %v; want an executable copy", st, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "trainer")); !os.IsNotExist(err) {
		t.Fatalf("a staged copy is at the final name before Commit: %v", err)
	}
	final, err := bincache.Commit(ctx, r, "node1", f, staged)
	if err != nil || final != filepath.Join(dir, "trainer") || sum(t, final) != f.SHA256 {
		t.Fatalf("Commit = %s, %v", final, err)
	}
	if _, err := os.Stat(staged); !os.IsNotExist(err) {
		t.Fatalf("staged copy still there after Commit: %v", err)
	}
	other, err := bincache.Stage(ctx, r, "node1", f)
	if err != nil {
		t.Fatal(err)
	}
	if err := bincache.Discard(ctx, r, "node1", other); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(other); !os.IsNotExist(err) {
		t.Fatalf("discarded copy still there: %v", err)
	}
	short := &truncating{r: r}
	if _, err := bincache.Stage(ctx, short, "node1", f); err == nil || !strings.Contains(err.Error(), "copy truncated") {
		t.Fatalf("Stage of a stream cut short: %v; want it refused", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("the cache holds %v; want only the committed copy", ents)
	}
	if _, err := bincache.Stage(ctx, r, "down", f); err == nil || !strings.Contains(err.Error(), "host down") {
		t.Fatalf("Stage to an unreachable host: %v; want an error naming it", err)
	}
}

// truncating is a Runner whose transfers end early, as a killed
// launcher's do.
type truncating struct{ r bincache.Runner }

func (c *truncating) Run(ctx context.Context, host string, stdin io.Reader, argv ...string) ([]byte, error) {
	if stdin != nil {
		stdin = io.LimitReader(stdin, 1000)
	}
	return c.r.Run(ctx, host, stdin, argv...)
}
