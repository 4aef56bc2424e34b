package preflight_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"

	"github.com/gotrain/gotrain/launch/preflight"
	"github.com/gotrain/gotrain/launch/ssh"
)

// local runs commands on this machine through sh, as ssh runs them on a
// host with only the system's programs, and reports failures as package
// ssh does.
type local struct{}

func (local) Run(ctx context.Context, host string, stdin io.Reader, argv ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", ssh.Quote(argv...))
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	var stderr bytes.Buffer
	cmd.Stdin, cmd.Stderr = stdin, &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, ssh.Classify(host, err, stderr.String())
	}
	return out, nil
}

func ExampleCheck() {
	// A launcher passes ssh.Client{Options: ...}; here the "hosts" are
	// this machine, which has no gotrain-v0 in the system's directories.
	err := preflight.Check(context.Background(), local{}, preflight.Plan{
		Hosts: []preflight.Host{
			{Name: "node0", Addr: "10.0.0.1", Workers: 2},
			{Name: "node1", Addr: "10.0.0.2", Workers: 2},
		},
		Gotrain: "gotrain-v0",
	})
	fmt.Println(err)
	// Output:
	// host node0: gotrain not found (gotrain-v0): install this build there (or give its path), or use --copy
	// host node1: gotrain not found (gotrain-v0): install this build there (or give its path), or use --copy
}
