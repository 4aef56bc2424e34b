package preflight

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/gotrain/gotrain/launch/ssh"
)

// The test binary is also the hosts' gotrain: run as
// "<test binary> preflight-node" it is Node, as `gotrain preflight-node`
// is. Two variables, set per host by the fake ssh, stand for what one
// machine cannot show: PREFLIGHT_TEST_MACHINE makes the node claim to be
// on its own machine, PREFLIGHT_TEST_CLOSE names ports it closes right
// after listening (nothing listens there, as behind a rejecting firewall).
func TestMain(m *testing.M) {
	if len(os.Args) == 2 && os.Args[1] == NodeCommand {
		if id := os.Getenv("PREFLIGHT_TEST_MACHINE"); id != "" {
			machineID = func() string { return id }
		}
		if s := os.Getenv("PREFLIGHT_TEST_CLOSE"); s != "" {
			closed := map[int]bool{}
			for _, f := range strings.Split(s, ",") {
				p, _ := strconv.Atoi(f)
				closed[p] = true
			}
			closeAfterListen = func(port int) bool { return closed[port] }
		}
		var out io.Writer = os.Stdout
		if path := os.Getenv("PREFLIGHT_TEST_ANSWERED"); path != "" {
			out = &answerMark{w: os.Stdout, path: path}
		}
		if err := Node(context.Background(), os.Stdin, out); err != nil {
			fmt.Fprintln(os.Stderr, "gotrain:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// answerMark is the node's output, which creates the file path once the
// node has answered: PREFLIGHT_TEST_ANSWERED tells a test when that is.
type answerMark struct {
	w    io.Writer
	path string
	once sync.Once
}

func (a *answerMark) Write(p []byte) (int, error) {
	n, err := a.w.Write(p)
	a.once.Do(func() { os.WriteFile(a.path, nil, 0o644) })
	return n, err
}

// fakeSSH is an ssh that runs the command on this machine, as host:
// with $dir/home/HOST as HOME, $dir/sys (the system programs a host's
// shell needs, and nothing else: no gotrain the machine may have) as
// PATH, and $dir/HOST.env sourced first (the host's environment), and
// that fails as ssh does for the hosts named badauth, nokey and down, and
// never answers for the host named hang.
const fakeSSH = `#!/bin/sh
PATH="$FAKE_SSH_DIR/sys"
export PATH
while [ $# -gt 0 ]; do
  case "$1" in
  --) shift; break ;;
  -o) shift 2 ;;
  *) shift ;;
  esac
done
host=$1
case "$host" in
badauth) echo "root@badauth: Permission denied (publickey)." >&2; exit 255 ;;
nokey) echo "Host key verification failed." >&2; exit 255 ;;
down) echo "ssh: connect to host down port 22: Connection refused" >&2; exit 255 ;;
hang) exec sleep 60 ;;
esac
HOME="$FAKE_SSH_DIR/home/$host"
export HOME
mkdir -p "$HOME"
cd "$HOME"
if [ -f "$FAKE_SSH_DIR/$host.env" ]; then . "$FAKE_SSH_DIR/$host.env"; fi
exec sh -c "$2"
`

// cluster is a set of fake hosts on this machine.
type cluster struct {
	t   *testing.T
	dir string
	ssh ssh.Client
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	dir := fakeSSHDir(t, t.TempDir())
	t.Setenv("FAKE_SSH_DIR", dir)
	return &cluster{t: t, dir: dir, ssh: ssh.Client{Program: filepath.Join(dir, "ssh")}}
}

// sysPrograms are the programs the fake hosts' shells run: the fake ssh's
// own, and those of package bincache's scripts.
var sysPrograms = []string{"sh", "sleep", "mkdir", "mktemp", "tee", "rm", "chmod", "mv", "cat", "wc", "cut", "sha256sum"}

// fakeSSHDir writes the fake ssh to dir/ssh and links sysPrograms, from
// the system's directories, into dir/sys, and returns dir.
func fakeSSHDir(t testing.TB, dir string) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "ssh"), []byte(fakeSSH), 0o755); err != nil {
		t.Fatal(err)
	}
	sys := filepath.Join(dir, "sys")
	if err := os.Mkdir(sys, 0o755); err != nil {
		t.Fatal(err)
	}
next:
	for _, name := range sysPrograms {
		for _, d := range []string{"/usr/bin", "/bin"} {
			if err := os.Symlink(filepath.Join(d, name), filepath.Join(sys, name)); err == nil {
				if _, err := os.Stat(filepath.Join(sys, name)); err == nil {
					continue next
				}
				os.Remove(filepath.Join(sys, name))
			}
		}
		t.Fatalf("no %s in /usr/bin or /bin", name)
	}
	return dir
}

// env sets host's environment variables (lines of sh).
func (c *cluster) env(host string, lines ...string) {
	c.t.Helper()
	f, err := os.OpenFile(filepath.Join(c.dir, host+".env"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	defer f.Close()
	for _, l := range lines {
		fmt.Fprintln(f, l)
	}
}

// home is host's home directory.
func (c *cluster) home(host string) string { return filepath.Join(c.dir, "home", host) }

// self is the test binary, the hosts' gotrain.
func self(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// freePorts finds a master port and a data-plane range of n ports that
// nothing listens on, away from the default ports, so tests running at
// once do not meet.
func freePorts(t testing.TB, n int) (master, lo, hi int) {
	t.Helper()
next:
	for range 50 {
		base := 20000 + rand.IntN(8000)
		for p := base; p <= base+n; p++ {
			l, err := net.Listen("tcp", ":"+strconv.Itoa(p))
			if err != nil {
				continue next
			}
			l.Close()
		}
		return base, base + 1, base + n
	}
	t.Fatal("no free port range")
	return
}

// plan is a Plan for hosts (NAME or NAME=ADDR) with two workers each,
// run from the test binary, on free ports.
func testPlan(t *testing.T, hosts ...string) Plan {
	t.Helper()
	master, lo, hi := freePorts(t, 6)
	p := Plan{Gotrain: self(t), MasterPort: master, PortMin: lo, PortMax: hi, WorkerMemory: 1 << 20}
	for _, h := range hosts {
		name, addr, _ := strings.Cut(h, "=")
		p.Hosts = append(p.Hosts, Host{Name: name, Addr: addr, Workers: 2})
	}
	return p
}

// lines is err's failure lines, failing the test if err is not an *Error.
func lines(t *testing.T, err error) []string {
	t.Helper()
	e, ok := err.(*Error)
	if !ok {
		t.Fatalf("err = %v (%T); want *preflight.Error", err, err)
	}
	var out []string
	for _, f := range e.Failures {
		if strings.Contains(f.Line, "\n") {
			t.Errorf("failure spans lines: %q", f.Line)
		}
		out = append(out, f.Line)
	}
	return out
}

// wantLines checks that got has exactly one line containing each of the
// want sets (every string of a set in one line), and no other line.
func wantLines(t *testing.T, got []string, want ...[]string) {
	t.Helper()
	if testing.Verbose() {
		for _, l := range got {
			t.Log(l)
		}
	}
	used := make([]bool, len(got))
	for _, w := range want {
		found := false
		for i, l := range got {
			if !used[i] && containsAll(l, w) {
				used[i], found = true, true
				break
			}
		}
		if !found {
			t.Errorf("no line with all of %q in:\n%s", w, strings.Join(got, "\n"))
		}
	}
	if i := slices.Index(used, false); i >= 0 {
		t.Errorf("unexpected line %q in:\n%s", got[i], strings.Join(got, "\n"))
	}
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
