package distributed

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testproc"
)

// otherBuild copies the test binary and appends bytes to the copy: a
// program that behaves the same with another sha256.
func otherBuild(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "other.test")
	if err := os.WriteFile(path, append(b, "another build"...), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestBuildMismatch: a rank started from another build fails every rank
// within 2 s, each naming both ranks' hashes; GOTRAIN_ALLOW_MIXED_BUILDS=1
// lets the group form and run collectives.
func TestBuildMismatch(t *testing.T) {
	const n, culprit = 3, 1
	other := otherBuild(t)
	mine, err := localBuild()
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := hashFile(other)
	if err != nil {
		t.Fatal(err)
	}
	if mine.SHA256 == theirs {
		t.Fatal("the copy has the test binary's hash")
	}
	exe := func(r int) string {
		if r == culprit {
			return other
		}
		return ""
	}
	env := func(t *testing.T, extra ...string) []string {
		return append([]string{"GOTRAIN_TOKEN=build-test", "GOTRAIN_RUN_ID=" + t.Name(), "GOTRAIN_CONNECT_TIMEOUT=30s"}, extra...)
	}
	t.Run("refused", func(t *testing.T) {
		ranks := testproc.Start(t, "join", n, testproc.Options{Env: env(t), Exe: exe})
		checkAllFail(t, ranks, "build mismatch")
		for _, p := range ranks.Procs() {
			text := p.Text()
			for _, h := range []string{mine.SHA256, theirs, "rank 1 on " + mine.Host + " runs " + shortHash(theirs), "rank 0 on " + mine.Host + " runs " + shortHash(mine.SHA256)} {
				if !strings.Contains(text, h) {
					t.Errorf("rank %d's error does not name %q", p.Rank, h)
				}
			}
		}
	})
	t.Run("allowed", func(t *testing.T) {
		ranks := testproc.Start(t, "collectives", n, testproc.Options{Env: env(t, "GOTRAIN_ALLOW_MIXED_BUILDS=1"), Exe: exe, Timeout: 40 * time.Second})
		ranks.WaitOK()
		if out := ranks.Procs()[culprit].Text(); !strings.Contains(out, "another build than rank 0") {
			t.Errorf("rank %d does not log the mixed builds:\n%s", culprit, out)
		}
	})
}
