package bincache_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/gotrain/gotrain/launch/bincache"
	"github.com/gotrain/gotrain/launch/ssh"
)

// home runs commands on this machine through sh, as ssh runs them on a
// host, with HOME set to the "host's" home directory.
type home string

func (h home) Run(ctx context.Context, host string, stdin io.Reader, argv ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "sh", "-c", ssh.Quote(argv...))
	cmd.Env = append(os.Environ(), "HOME="+string(h))
	var stderr bytes.Buffer
	cmd.Stdin, cmd.Stderr = stdin, &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, ssh.Classify(host, err, stderr.String())
	}
	return out, nil
}

func ExampleEnsure() {
	dir, _ := os.MkdirTemp("", "bincache-example")
	defer os.RemoveAll(dir)
	prog := filepath.Join(dir, "trainer")
	os.WriteFile(prog, []byte("#!/bin/sh\necho training\n"), 0o755)

	// A launcher passes ssh.Client{}; here the host is this machine.
	path, err := bincache.Ensure(context.Background(), home(dir), "node1", prog)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(strings.TrimPrefix(path, dir))
	out, _ := exec.Command(path).Output()
	fmt.Print(string(out))
	// Output:
	// /.cache/gotrain/bin/7d1121afa96fef83a2970a5546dc359d7df13f3919a3663339a753901ac05a1e/trainer
	// training
}

func ExampleStage() {
	dir, _ := os.MkdirTemp("", "bincache-example")
	defer os.RemoveAll(dir)
	prog := filepath.Join(dir, "trainer")
	os.WriteFile(prog, []byte("#!/bin/sh\necho training\n"), 0o755)
	f, _ := bincache.Stat(prog)
	ctx := context.Background()

	staged, err := bincache.Stage(ctx, home(dir), "node1", f)
	if err != nil {
		fmt.Println(err)
		return
	}
	// Here the staged file proves its hash by running; gotrain reports
	// its own sha256.
	out, _ := exec.Command(staged).Output()
	fmt.Print(string(out))
	path, err := bincache.Commit(ctx, home(dir), "node1", f, staged)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(strings.TrimPrefix(path, dir))
	// Output:
	// training
	// /.cache/gotrain/bin/7d1121afa96fef83a2970a5546dc359d7df13f3919a3663339a753901ac05a1e/trainer
}
