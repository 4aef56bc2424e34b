package ssh

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestQuoteRoundTripsThroughSh(t *testing.T) {
	argv := []string{"gotrain", "run", "--lr", "0.1", "it's", "a b", "", "$HOME", "`x`", "a\"b", "-", "*"}
	// Evaluate the line as ssh's remote shell would.
	out, err := exec.Command("sh", "-c", "set -- "+Quote(argv...)+`; for a in "$@"; do printf '%s\n' "$a"; done`).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if !reflect.DeepEqual(got, argv) {
		t.Fatalf("the remote shell would see %q; want %q", got, argv)
	}
}

func TestArgsPutUserOptionsFirst(t *testing.T) {
	c := Client{Options: []string{"Port=2222", "ConnectTimeout=3"}}
	args := c.Args("node1", "gotrain", "agent")
	want := []string{"-o", "Port=2222", "-o", "ConnectTimeout=3", "-o", "BatchMode=yes"}
	if !reflect.DeepEqual(args[:len(want)], want) {
		t.Fatalf("args %q; want the user's options first, then BatchMode", args)
	}
	if tail := args[len(args)-3:]; !reflect.DeepEqual(tail, []string{"--", "node1", "gotrain agent"}) {
		t.Fatalf("args end %q", tail)
	}
}

// fakeSSH writes a program that prints stderr and exits with code, as
// ssh would.
func fakeSSH(t *testing.T, stderr string, code int) string {
	path := filepath.Join(t.TempDir(), "ssh")
	script := "#!/bin/sh\nprintf '%s\\n' '" + strings.ReplaceAll(stderr, "'", "") + "' >&2\nexit " + strconv.Itoa(code) + "\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRunClassifiesSSHFailures(t *testing.T) {
	for _, tc := range []struct {
		stderr string
		kind   Kind
		line   string
	}{
		{"ssh: connect to host node1 port 22: Connection refused", Unreachable, "host node1: ssh: unreachable (Connection refused)"},
		{"ssh: Could not resolve hostname node1: Name or service not known", Unreachable, "unreachable (Could not resolve hostname)"},
		{"ssh: connect to host node1 port 22: Connection timed out", Unreachable, "unreachable (Connection timed out)"},
		{"root@node1: Permission denied (publickey).", AuthRefused, "authentication refused (Permission denied); passwordless ssh is needed: ssh-copy-id node1"},
		{"Host key verification failed.", HostKeyUnknown, "host key not trusted (Host key verification failed); connect once with ssh node1"},
		{"kex_exchange_identification: read: Connection reset by peer", Other, "failed (kex_exchange_identification: read: Connection reset by peer)"},
	} {
		c := Client{Program: fakeSSH(t, tc.stderr, 255)}
		_, err := c.Run(context.Background(), "node1", nil, "true")
		var e *Error
		if !errors.As(err, &e) || e.Kind != tc.kind || !strings.Contains(err.Error(), tc.line) || strings.Contains(err.Error(), "\n") {
			t.Errorf("ssh printing %q: %v; want kind %v, one line with %q", tc.stderr, err, tc.kind, tc.line)
		}
	}
}

func TestRunReportsRemoteFailure(t *testing.T) {
	c := Client{Program: fakeSSH(t, "gotrain: command not found", 127)}
	_, err := c.Run(context.Background(), "node1", nil, "gotrain", "version")
	var e *ExitError
	if !errors.As(err, &e) || e.Code != 127 || err.Error() != "host node1: gotrain: command not found" {
		t.Fatalf("err %v; want the remote command's status and stderr line", err)
	}
}

func TestRunReturnsStdout(t *testing.T) {
	// "ssh" here is sh: it runs the quoted command line it is given last.
	path := filepath.Join(t.TempDir(), "ssh")
	if err := os.WriteFile(path, []byte("#!/bin/sh\nfor a; do last=$a; done\nexec sh -c \"$last\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := Client{Program: path}.Run(context.Background(), "node1", strings.NewReader("from stdin"), "sh", "-c", "cat; echo ' and' \"$0\"", "it's")
	if err != nil || string(out) != "from stdin and it's\n" {
		t.Fatalf("Run = %q, %v", out, err)
	}
}

// useTempDir makes the test's own directory the one Multiplex makes its
// socket directories in (and removes stale ones from).
func useTempDir(t *testing.T) { t.Setenv("TMPDIR", t.TempDir()) }

func TestMultiplexSharesOneConnectionPerHost(t *testing.T) {
	useTempDir(t)
	c, end, err := Client{Options: []string{"Port=2222"}}.Multiplex()
	if err != nil {
		t.Fatal(err)
	}
	dir := c.mux.dir
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("socket directory %s: %v, %v; want a private directory", dir, st, err)
	}
	args := strings.Join(c.Args("node1", "true"), " ")
	for _, want := range []string{"-o Port=2222 ", "-o ControlMaster=auto ", "-o ControlPath=" + filepath.Join(dir, "%C") + " ", "-o ControlPersist=5 "} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	// No master runs for node1: ending it fails, and the directory must
	// still be removed.
	end()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("socket directory %s left behind: %v", dir, err)
	}
}

func TestMultiplexLeavesTheUsersControlSettings(t *testing.T) {
	useTempDir(t)
	for _, o := range []string{"ControlMaster=no", "controlpath=/tmp/mine-%C", "ControlPersist=60"} {
		c, end, err := Client{Options: []string{o}}.Multiplex()
		if err != nil {
			t.Fatal(err)
		}
		end()
		args := strings.Join(c.Args("node1", "true"), " ")
		if strings.Count(strings.ToLower(args), "control") != 1 {
			t.Errorf("with -o %s: args %q; want only the user's control setting", o, args)
		}
	}
}
