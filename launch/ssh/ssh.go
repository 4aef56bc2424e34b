// Package ssh runs commands on other machines through the user's
// OpenSSH client, so that ~/.ssh/config, agents, ProxyJump and
// known_hosts work as they do for the user, and turns ssh's own failures
// into one line that names the host and the cause.
package ssh

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

// EnvSSH names the ssh program to run instead of "ssh" from PATH.
const EnvSSH = "GOTRAIN_SSH"

// Kind classifies a failure of ssh itself (exit status 255), as opposed
// to a failure of the remote command.
type Kind int

// The kinds of ssh failure.
const (
	// Other is a failure of ssh that none of the kinds below describes.
	Other Kind = iota
	// Unreachable: the name does not resolve, or the connection was
	// refused, timed out or found no route.
	Unreachable
	// AuthRefused: the server refused every key (BatchMode forbids
	// passwords and prompts).
	AuthRefused
	// HostKeyUnknown: the host's key is not in known_hosts, or differs
	// from the one there.
	HostKeyUnknown
)

func (k Kind) String() string {
	switch k {
	case Unreachable:
		return "unreachable"
	case AuthRefused:
		return "authentication refused"
	case HostKeyUnknown:
		return "host key not trusted"
	}
	return "failed"
}

// Error is a failure of ssh to run a command on Host.
type Error struct {
	Host   string
	Kind   Kind
	Detail string // ssh's own message, one line
}

func (e *Error) Error() string {
	hint := ""
	switch e.Kind {
	case AuthRefused:
		hint = "; passwordless ssh is needed: ssh-copy-id " + e.Host
	case HostKeyUnknown:
		hint = "; connect once with ssh " + e.Host + " to check and accept its key"
	}
	return fmt.Sprintf("host %s: ssh: %s (%s)%s", e.Host, e.Kind, e.Detail, hint)
}

// ExitError is a remote command that ran and failed.
type ExitError struct {
	Host   string
	Code   int
	Stderr string // its last line of stderr, if any
}

func (e *ExitError) Error() string {
	if e.Stderr == "" {
		return fmt.Sprintf("host %s: remote command exited with status %d", e.Host, e.Code)
	}
	return fmt.Sprintf("host %s: %s", e.Host, e.Stderr)
}

// Client is how to reach the hosts. Its zero value runs "ssh" (or
// $GOTRAIN_SSH) with gotrain's defaults.
type Client struct {
	// Program is the ssh client; "" means $GOTRAIN_SSH, else "ssh".
	Program string
	// Options are ssh configuration settings such as
	// "IdentityFile=~/.ssh/cluster" or "Port=2222", each passed as
	// -o OPTION ahead of gotrain's defaults, so that they win (ssh keeps
	// the first value it is given for a setting).
	Options []string

	// mux, when set (Multiplex), shares one connection per host among
	// the client's sessions.
	mux *mux
}

// defaults are gotrain's settings: never prompt (a prompt would hang a
// launcher with no terminal), fail a dead host in 10 s, and notice a
// dead connection in about 15 s.
var defaults = []string{
	"BatchMode=yes",
	"ConnectTimeout=10",
	"ServerAliveInterval=5",
	"ServerAliveCountMax=3",
}

// Args returns ssh's arguments for running argv on host: the options,
// then the host, then the command quoted for the remote shell.
func (c Client) Args(host string, argv ...string) []string {
	var args []string
	for _, o := range c.Options {
		args = append(args, "-o", o)
	}
	for _, o := range defaults {
		args = append(args, "-o", o)
	}
	args = append(args, c.mux.options(c.Options, host)...)
	args = append(args, "--", host)
	if len(argv) > 0 {
		args = append(args, Quote(argv...))
	}
	return args
}

// Command returns the command that runs argv on host. Its process is
// ended when ctx is.
func (c Client) Command(ctx context.Context, host string, argv ...string) *exec.Cmd {
	return exec.CommandContext(ctx, c.program(), c.Args(host, argv...)...)
}

// program is the ssh client to run.
func (c Client) program() string {
	if c.Program != "" {
		return c.Program
	}
	if p := os.Getenv(EnvSSH); p != "" {
		return p
	}
	return "ssh"
}

// Run runs argv on host with stdin as its input and returns its
// standard output. A failure of ssh is an *Error; a remote command that
// exits non-zero, an *ExitError.
func (c Client) Run(ctx context.Context, host string, stdin io.Reader, argv ...string) ([]byte, error) {
	cmd := c.Command(ctx, host, argv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &stdout, &stderr
	err := cmd.Run()
	if err == nil {
		return stdout.Bytes(), nil
	}
	if ctx.Err() != nil {
		return stdout.Bytes(), fmt.Errorf("host %s: %w", host, ctx.Err())
	}
	return stdout.Bytes(), Classify(host, err, stderr.String())
}

// Classify turns the outcome of an ssh command (its Wait error and its
// stderr) into an *Error when ssh itself failed (status 255), an
// *ExitError when the remote command did, or a wrapped err otherwise
// (ssh could not be started).
func Classify(host string, err error, stderr string) error {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return fmt.Errorf("host %s: run ssh: %w", host, err)
	}
	last := lastLine(stderr)
	if ee.ExitCode() != 255 {
		return &ExitError{Host: host, Code: ee.ExitCode(), Stderr: last}
	}
	e := &Error{Host: host, Kind: Other, Detail: last}
	if e.Detail == "" {
		e.Detail = "exit status 255"
	}
	for _, r := range rules {
		if strings.Contains(stderr, r.text) {
			e.Kind, e.Detail = r.kind, r.text
			break
		}
	}
	return e
}

// rules map ssh's messages to kinds, most specific first.
var rules = []struct {
	text string
	kind Kind
}{
	{"REMOTE HOST IDENTIFICATION HAS CHANGED", HostKeyUnknown},
	{"Host key verification failed", HostKeyUnknown},
	{"Permission denied", AuthRefused},
	{"Too many authentication failures", AuthRefused},
	{"Could not resolve hostname", Unreachable},
	{"Name or service not known", Unreachable},
	{"Connection refused", Unreachable},
	{"Connection timed out", Unreachable},
	{"Operation timed out", Unreachable},
	{"No route to host", Unreachable},
	{"Network is unreachable", Unreachable},
	{"Connection closed by", Unreachable},
}

// lastLine is the last non-empty line of s, without ssh's warnings about
// adding a host to known_hosts.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l != "" && !strings.HasPrefix(l, "Warning: Permanently added") {
			return l
		}
	}
	return ""
}

// Quote joins argv into one command line for a POSIX shell, quoting
// every word that needs it, as ssh hands its command to the remote
// user's shell.
func Quote(argv ...string) string {
	words := make([]string, len(argv))
	for i, a := range argv {
		words[i] = quoteWord(a)
	}
	return strings.Join(words, " ")
}

func quoteWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=@%+,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
