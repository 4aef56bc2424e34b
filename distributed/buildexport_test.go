package distributed

import (
	"os"
	"strings"
	"testing"
)

// TestLocalBuild: the exported identity is the one rendezvous publishes,
// and SameBuild compares as rendezvous does.
func TestLocalBuild(t *testing.T) {
	b, err := LocalBuild()
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	sum, err := hashFile(exe)
	if err != nil || b.SHA256 != sum {
		t.Fatalf("LocalBuild sha256 %s; the executable's is %s (%v)", b.SHA256, sum, err)
	}
	other := b
	other.Host, other.OS = "elsewhere", "plan9"
	if !b.SameBuild(other) {
		t.Error("a build on another host is not the same build")
	}
	other.SHA256 = strings.Repeat("0", 64)
	if b.SameBuild(other) {
		t.Error("another hash is the same build")
	}
	other = b
	other.Protocol++
	if b.SameBuild(other) {
		t.Error("another protocol is the same build")
	}
	if s := b.String(); !strings.HasPrefix(s, sum[:12]+" (gotrain ") {
		t.Errorf("String = %q", s)
	}
}
