package preflight

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/gotrain/gotrain/launch/ssh"
)

// BenchmarkCheck is one pre-flight of two hosts with two workers each
// and --copy, the copies already cached (as from the second run on): the
// launcher's share of the time from `gotrain run --hosts` to the first
// step, without ssh's own handshakes (the hosts are this machine, reached
// through a fake ssh).
func BenchmarkCheck(b *testing.B) {
	dir := fakeSSHDir(b, b.TempDir())
	prog := filepath.Join(dir, "ssh")
	b.Setenv("FAKE_SSH_DIR", dir)
	for h, addr := range map[string]string{"node0": "127.0.0.1", "node1": "127.0.0.2"} {
		if err := os.WriteFile(filepath.Join(dir, h+".env"), []byte("export GOTRAIN_LISTEN_HOST="+addr+"\n"), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	master, lo, hi := freePorts(b, 101)
	p := Plan{
		Hosts:      []Host{{Name: "node0", Addr: "127.0.0.1", Workers: 2}, {Name: "node1", Addr: "127.0.0.2", Workers: 2}},
		Gotrain:    "gotrain",
		Copy:       true,
		MasterPort: master, PortMin: lo, PortMax: hi,
	}
	r := ssh.Client{Program: prog}
	if err := Check(context.Background(), r, p); err != nil { // fills the caches
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if err := Check(context.Background(), r, p); err != nil {
			b.Fatal(err)
		}
	}
}
