package ssh

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// ControlPersist is how long a shared connection outlives its last
// session: long enough to carry a launcher's next phase (pre-flight, then
// the agents), short enough that a launcher killed before it could end
// its connections leaves no ssh process behind for long.
const ControlPersist = 5 * time.Second

// mux is the state of a multiplexing client: the private directory of
// its control sockets and the hosts it has connected to.
type mux struct {
	dir string

	mu    sync.Mutex // guards hosts
	hosts map[string][]string
}

// controlKeys are the settings with which a user chooses connection
// sharing; when the user gives any, the launcher adds none of its own.
var controlKeys = []string{"controlmaster", "controlpath", "controlpersist"}

// userControls reports whether options set connection sharing.
func userControls(options []string) bool {
	for _, o := range options {
		k, _, _ := strings.Cut(o, "=")
		k = strings.ToLower(strings.TrimSpace(k))
		for _, c := range controlKeys {
			if k == c {
				return true
			}
		}
	}
	return false
}

// options are the ssh settings that share one connection to host among
// every session (none without multiplexing, or when the user's options
// choose connection sharing themselves), and record host for Close.
func (m *mux) options(user []string, host string) []string {
	if m == nil || userControls(user) {
		return nil
	}
	opts := m.controlOptions()
	m.mu.Lock()
	if _, ok := m.hosts[host]; !ok {
		m.hosts[host] = append([]string(nil), user...)
	}
	m.mu.Unlock()
	return opts
}

func (m *mux) controlOptions() []string {
	return []string{
		"-o", "ControlMaster=auto",
		// %C is a hash of the local host, remote host, port and user: it
		// keeps the path short (a socket's path is limited to ~100 bytes).
		"-o", "ControlPath=" + filepath.Join(m.dir, "%C"),
		"-o", fmt.Sprintf("ControlPersist=%d", int(ControlPersist/time.Second)),
	}
}

// Multiplex returns a client like c whose sessions to one host share one
// authenticated ssh connection (OpenSSH's ControlMaster), so that only a
// host's first session pays for the handshake, and a function that ends
// those connections and removes their private socket directory; call it
// when no session is left. A user's own ControlMaster, ControlPath or
// ControlPersist option turns the launcher's sharing off for c, so that
// the user's settings hold.
func (c Client) Multiplex() (Client, func(), error) {
	if userControls(c.Options) {
		return c, func() {}, nil
	}
	// A short base: a socket path longer than about 100 bytes is refused.
	base := os.TempDir()
	if len(base) > 40 {
		base = "/tmp"
	}
	// The pid in the name lets a later launcher remove the directory of
	// one that was killed before it could (removeStale).
	removeStale(base)
	dir, err := os.MkdirTemp(base, fmt.Sprintf("gotrain-ssh-%d-", os.Getpid()))
	if err != nil {
		return c, nil, fmt.Errorf("ssh connection sharing: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		os.RemoveAll(dir)
		return c, nil, fmt.Errorf("ssh connection sharing: %w", err)
	}
	m := &mux{dir: dir, hosts: map[string][]string{}}
	c.mux = m
	return c, func() { c.closeMux() }, nil
}

// Disconnect ends host's shared connection now, and with it every
// session to host (without Multiplex, or before any session to host, it
// does nothing). Killing a session's ssh does not end a shared
// connection, which holds the session's output open until it notices a
// dead link: a launcher giving up on a host calls Disconnect too.
func (c Client) Disconnect(host string) {
	m := c.mux
	if m == nil {
		return
	}
	m.mu.Lock()
	user, ok := m.hosts[host]
	m.mu.Unlock()
	if ok {
		c.exit(host, user)
	}
}

// exit asks host's master to end (ssh -O exit); a host whose master has
// already gone answers with an error: there is nothing left to end.
func (c Client) exit(host string, user []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var args []string
	for _, o := range user {
		args = append(args, "-o", o)
	}
	args = append(args, c.mux.controlOptions()...)
	args = append(args, "-O", "exit", "--", host)
	_ = exec.CommandContext(ctx, c.program(), args...).Run()
}

// closeMux asks every shared connection to end at once (ssh -O exit) and
// removes the socket directory.
func (c Client) closeMux() {
	m := c.mux
	m.mu.Lock()
	hosts := m.hosts
	m.hosts = map[string][]string{}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for host, user := range hosts {
		wg.Go(func() { c.exit(host, user) })
	}
	wg.Wait()
	os.RemoveAll(m.dir)
}
