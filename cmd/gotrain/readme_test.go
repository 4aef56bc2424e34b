package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testnet"
	"github.com/gotrain/gotrain/internal/testproc"
)

// readmeCommand is one shell command of the README's command blocks.
type readmeCommand struct {
	line int    // 1-based line in README.md
	text string // the command as written, comments and continuations removed
}

// readmeCommands returns the shell commands of README.md's indented code
// blocks that run gotrain or build a program for it, in the order written.
func readmeCommands(t *testing.T, path string) []readmeCommand {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cmds []readmeCommand
	sc := bufio.NewScanner(f)
	fenced, prevBlank, inBlock := false, true, false
	var cont *readmeCommand
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		switch {
		case strings.TrimSpace(l) == "":
			prevBlank, inBlock, cont = true, false, nil
			continue
		case strings.HasPrefix(l, "    ") && (inBlock || prevBlank):
			inBlock = true
		default:
			prevBlank, inBlock, cont = false, false, nil
			continue
		}
		prevBlank = false
		text := stripShellComment(strings.TrimSpace(l))
		more := strings.HasSuffix(text, `\`)
		text = strings.TrimSpace(strings.TrimSuffix(text, `\`))
		if cont != nil {
			cont.text += " " + text
		} else if isGotrainCommand(text) {
			cmds = append(cmds, readmeCommand{line: n, text: text})
			cont = &cmds[len(cmds)-1]
		}
		if !more {
			cont = nil
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return cmds
}

// stripShellComment drops a trailing "# ..." that is not inside quotes.
func stripShellComment(s string) string {
	var quote rune
	for i, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && (i == 0 || s[i-1] == ' '):
			return strings.TrimSpace(s[:i])
		}
	}
	return s
}

// isGotrainCommand reports whether a command-block line runs gotrain (after
// any VAR=value assignments) or builds a program with the go command.
func isGotrainCommand(s string) bool {
	f := strings.Fields(s)
	for len(f) > 0 && strings.Contains(f[0], "=") && !strings.HasPrefix(f[0], "-") {
		f = f[1:]
	}
	if len(f) < 2 {
		return false
	}
	return f[0] == "gotrain" || (f[0] == "go" && (f[1] == "build" || f[1] == "run"))
}

// readmeSkips are the README commands this test cannot run on one machine,
// each with the reason; the multi-node ones run in the namespace-cluster
// tests, the benchmarks are measurements.
var readmeSkips = []struct {
	match  *regexp.Regexp
	reason string
}{
	{regexp.MustCompile(`…|\.\.\.`), "a placeholder for the reader's own value"},
	{regexp.MustCompile(`--hosts|--hostfile|--nnodes|--master-addr`), "needs several machines (the namespace-cluster tests run these)"},
	{regexp.MustCompile(`^(srun|mpirun)\b`), "needs Slurm or MPI (TestSlurm*/TestMPI* run these)"},
	{regexp.MustCompile(`^gotrain bench\b`), "a benchmark: measured, not tested (its flags are tested in bench_*_test.go)"},
	{regexp.MustCompile(`^gotrain trace /tmp/`), "reads the flight dumps of an earlier failed job (TestFlightRecorder* make and read some)"},
}

// readmeDone marks output that shows a long job training; the test stops
// such a job there rather than run it to its end.
var readmeDone = regexp.MustCompile(`\b(step|epoch) \d+/\d+`)

// TestReadmeCommands runs every command of the README's command blocks
// that can run on one machine, as written, in README order in one
// directory (so that a file one command saves is there for the next),
// with `gotrain` the command under test and `go run ./cmd/gotrain` run as
// `gotrain`. Fixed listen addresses (:8080) become free loopback ports. A
// command passes when it exits 0, or, for a long job, when it has shown a
// training step (and is then stopped).
func TestReadmeCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every README command")
	}
	cmds := readmeCommands(t, filepath.Join("..", "..", "README.md"))
	if len(cmds) < 20 {
		t.Fatalf("found %d commands in README.md; the parser missed the command blocks", len(cmds))
	}
	dir := t.TempDir()
	bin := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(exe, filepath.Join(bin, "gotrain")); err != nil {
		t.Fatal(err)
	}
	module, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	// The files the README's commands name as the reader's own.
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 2000)
	if err := os.WriteFile(filepath.Join(dir, "input.txt"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	// An image folder as `gotrain train images` reads it.
	writeImageTree(t, filepath.Join(dir, "cifar10", "train"), 10, 10, 32)
	writeImageTree(t, filepath.Join(dir, "cifar10", "test"), 10, 2, 32)
	// A nanoGPT state dict of the default GPT, as --init takes (gotrain
	// writes one in nanoGPT's names), and a sharded checkpoint, which the
	// README's sharded run, stopped at its first step, does not write.
	fixtures := map[string]string{
		"weights.safetensors": "gotrain train gpt --max-steps 1 --save weights.safetensors",
		"big.sharded":         "gotrain train gpt --nproc-per-node 2 --sharding full --max-steps 2 --progress=false --save big.safetensors",
	}
	env := append(testproc.Environ("gotrain"),
		"PATH="+bin+":"+filepath.Join(runtime.GOROOT(), "bin")+":"+childPATH)
	// run runs script in wd; a long job is stopped at its first reported
	// step unless toEnd.
	run := func(t *testing.T, c readmeCommand, script, wd string, toEnd bool) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", "exec "+script)
		cmd.Dir, cmd.Env = wd, env
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
		cmd.WaitDelay = 10 * time.Second
		p := testproc.Watch(t, cmd, 0)
		trained := make(chan struct{})
		go func() {
			if testproc.Poll(3*time.Minute, func() bool {
				select {
				case <-p.Done():
					return true
				default:
				}
				return !toEnd && readmeDone.MatchString(p.Output())
			}) {
				close(trained)
			}
		}()
		select {
		case <-p.Done():
		case <-trained:
			select {
			case <-p.Done():
			default:
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
				<-p.Done()
				t.Logf("README.md:%d: stopped after its first reported step", c.line)
				return
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("README.md:%d: %s: neither ended nor reported a step within 3 minutes\n%s", c.line, c.text, p.Output())
		}
		if err := p.Err(); err != nil {
			t.Fatalf("README.md:%d: %s: %v\n%s", c.line, c.text, err, p.Output())
		}
	}
	for _, c := range cmds {
		t.Run(strconv.Itoa(c.line), func(t *testing.T) {
			for _, s := range readmeSkips {
				if s.match.MatchString(c.text) {
					t.Skipf("README.md:%d: %s: %s", c.line, c.text, s.reason)
				}
			}
			script, wd := c.text, dir
			f := strings.Fields(script)
			switch {
			case f[0] == "go" && f[1] == "run" && len(f) > 2 && f[2] == "./cmd/gotrain":
				script = "gotrain " + strings.Join(f[3:], " ")
			case f[0] == "go" && f[1] == "build":
				// Built from the module, into the directory the other
				// commands run in.
				wd = module
				script = strings.Replace(script, "-o ", "-o "+dir+"/", 1)
			}
			script = readmeListenAddr.ReplaceAllStringFunc(script, func(m string) string {
				return strings.TrimSuffix(m, strings.TrimLeft(m, " ")) + fmt.Sprintf("127.0.0.1:%d", testnet.FreePort(t))
			})
			for file, make := range fixtures {
				if _, err := os.Stat(filepath.Join(dir, file)); strings.Contains(script, file) && os.IsNotExist(err) {
					run(t, readmeCommand{line: c.line, text: make}, make, dir, true)
				}
			}
			run(t, c, script, wd, false)
		})
	}
}

// readmeListenAddr matches a listen address written as ":port".
var readmeListenAddr = regexp.MustCompile(`(^|\s):\d{4,5}\b`)
