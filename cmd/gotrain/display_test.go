package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gotrain/gotrain/datasets/mnist"
	"github.com/gotrain/gotrain/internal/testenv"
	"github.com/gotrain/gotrain/internal/testproc"
)

// tmuxServer is a tmux server of the test's own, on its own socket in a
// directory of its own (TMUX_TMPDIR), so none is left behind.
type tmuxServer struct {
	t      *testing.T
	tmux   string
	socket string
	env    []string
}

func newTmux(t *testing.T, name string) *tmuxServer {
	t.Helper()
	tmux := testenv.LookPath(t, "tmux")
	// Not t.TempDir(): a socket's path must stay short (108 bytes).
	dir, err := os.MkdirTemp("", "tmux")
	if err != nil {
		t.Fatal(err)
	}
	s := &tmuxServer{t: t, tmux: tmux, socket: fmt.Sprintf("gotrain-test-%d-%s", os.Getpid(), name),
		env: append(os.Environ(), "TMUX_TMPDIR="+dir, "PATH="+childPATH)}
	t.Cleanup(func() {
		kill := exec.Command(s.tmux, "-L", s.socket, "kill-server")
		kill.Env = s.env
		_ = kill.Run() // the server may have gone already
		os.RemoveAll(dir)
	})
	return s
}

func (s *tmuxServer) run(args ...string) string {
	s.t.Helper()
	cmd := exec.Command(s.tmux, append([]string{"-L", s.socket}, args...)...)
	cmd.Env = s.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		s.t.Fatalf("tmux %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// session starts command in a new detached session of width×height and
// returns a channel that receives a value (at most one pending) whenever
// the command has written to its terminal: by then tmux has drawn it, so
// a capture shows it. The command starts only once its output is piped.
func (s *tmuxServer) session(name string, width, height int, command string) <-chan struct{} {
	s.t.Helper()
	fifo := filepath.Join(s.t.TempDir(), "pane")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		s.t.Fatal(err)
	}
	// Read and write: opening never blocks, and the reader sees no end of
	// file between writers.
	f, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { f.Close() })
	wrote := make(chan struct{}, 1)
	go func() {
		buf := make([]byte, 64<<10)
		for {
			if _, err := f.Read(buf); err != nil {
				return
			}
			select {
			case wrote <- struct{}{}:
			default:
			}
		}
	}()
	start := "start-" + name
	// Inside the session, TMUX names this server for the inner tmux.
	s.run("new-session", "-d", "-s", name, "-x", fmt.Sprint(width), "-y", fmt.Sprint(height),
		fmt.Sprintf("'%s' wait-for %s; %s", s.tmux, start, command))
	// tmux writes to the pipe after it has parsed the output onto the screen.
	s.run("pipe-pane", "-O", "-t", name, "cat > '"+fifo+"'")
	s.run("wait-for", "-S", start)
	return wrote
}

// barLine matches the live display's line.
var barLine = regexp.MustCompile(`^epoch \d+/\d+ \[[=> ]+\] .*\b[1-9]\d* samples/s`)

// TestTerminalDisplay runs the demo job in a real terminal, at 80 and 200
// columns, with 1 and 2 workers: while it trains the screen shows one bar
// line with a samples/s figure that fits the width (never a wrapped
// continuation), and at the end the epoch's line and the summary.
func TestTerminalDisplay(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, width := range []int{80, 200} {
		for _, workers := range []int{1, 2} {
			t.Run(fmt.Sprintf("%dcols-%dworkers", width, workers), func(t *testing.T) {
				tm := newTmux(t, fmt.Sprintf("%d-%d", width, workers))
				cmd := fmt.Sprintf("cd '%s' && env %s '%s' train mnist --nproc-per-node %d --max-steps 400; echo gotrain-exit=$?; sleep 600",
					t.TempDir(), testproc.Env("gotrain"), exe, workers)
				wrote := tm.session("train", width, 24, cmd)
				sawBar := ""
				var screen string
				// The screen is checked after each write to the terminal, until
				// the command's exit status is on it.
				deadline := time.After(90 * time.Second)
				for !strings.Contains(screen, "gotrain-exit=") {
					select {
					case <-wrote:
					case <-deadline:
						t.Fatalf("gotrain still running after 90 s; screen:\n%s", screen)
					}
					// -p shows the screen's rows; -J joins rows that wrapped, so a
					// bar that wrapped is too wide in one or the other.
					screen = tm.run("capture-pane", "-p", "-t", "train")
					joined := tm.run("capture-pane", "-pJ", "-t", "train")
					for _, capture := range []string{screen, joined} {
						var bars []string
						for _, l := range strings.Split(capture, "\n") {
							if strings.HasPrefix(l, "epoch ") && strings.Contains(l, "[") {
								bars = append(bars, l)
							}
						}
						if len(bars) > 1 {
							t.Fatalf("%d bar lines on the screen; want at most one:\n%s", len(bars), capture)
						}
						if len(bars) == 1 {
							if n := len([]rune(bars[0])); n >= width {
								t.Fatalf("bar line %q is %d columns wide in a %d-column terminal; screen:\n%s", bars[0], n, width, capture)
							}
							if barLine.MatchString(bars[0]) {
								sawBar = bars[0]
							}
						}
					}
					if strings.Contains(screen, "gotrain-exit=") {
						screen = joined
					}
				}
				if sawBar == "" {
					t.Fatalf("no bar with a samples/s figure was ever on the screen; last screen:\n%s", screen)
				}
				// The run stops inside its epoch, so its step of 400 goes
				// before the slowest rank's step time, which a bar keeps
				// when there is room.
				if !regexp.MustCompile(` step \d+/400 `).MatchString(sawBar) {
					t.Errorf("bar %q lacks the run's step of its 400", sawBar)
				}
				if width == 200 && workers > 1 && !regexp.MustCompile(` r[01]$`).MatchString(sawBar) {
					t.Errorf("bar %q lacks the slowest rank's step time", sawBar)
				}
				t.Logf("bar at %d columns, %d workers: %s", width, workers, sawBar)
				if !strings.Contains(screen, "gotrain-exit=0") || !strings.Contains(screen, fmt.Sprintf("model=mlp world=%d ", workers)) {
					t.Fatalf("want exit 0 and the summary; screen:\n%s", screen)
				}
				if !regexp.MustCompile(`(?m)^epoch 1/1: 400 steps train_loss \d\.\d{4} test_acc 0\.\d{4} \d+ samples/s`).MatchString(screen) {
					t.Fatalf("want the epoch's line with its loss and accuracy; screen:\n%s", screen)
				}
			})
		}
	}
}

// mnistSubset writes the first train and test examples of the shipped
// MNIST as IDX files in a new directory, for --data: a job of whole
// epochs that takes a fraction of the time.
func mnistSubset(t *testing.T, train, test int) string {
	t.Helper()
	dir := t.TempDir()
	for _, sp := range []struct {
		split  mnist.Split
		prefix string
		n      int
	}{{mnist.Train, "train", train}, {mnist.Test, "t10k", test}} {
		d, err := mnist.Embedded(sp.split)
		if err != nil {
			t.Fatal(err)
		}
		// IDX: a magic number (unsigned bytes, the number of dimensions),
		// each dimension as a big-endian uint32, then the bytes.
		images := binary.BigEndian.AppendUint32(nil, 0x0803)
		for _, n := range []int{sp.n, mnist.Rows, mnist.Cols} {
			images = binary.BigEndian.AppendUint32(images, uint32(n))
		}
		labels := binary.BigEndian.AppendUint32(nil, 0x0801)
		labels = binary.BigEndian.AppendUint32(labels, uint32(sp.n))
		for i := range sp.n {
			images = append(images, d.Image(i)...)
			labels = append(labels, byte(d.Label(i)))
		}
		for name, b := range map[string][]byte{sp.prefix + "-images-idx3-ubyte": images, sp.prefix + "-labels-idx1-ubyte": labels} {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

// TestPipedOutput: with stdout and stderr a pipe, the output is plain
// lines: no carriage return, one line per epoch with the training loss
// and the test accuracy, and progress lines every --log-every. A third of
// MNIST makes epochs of 40 and 20 steps, far longer than --log-every.
func TestPipedOutput(t *testing.T) {
	data := mnistSubset(t, 20000, 2000)
	for _, workers := range []string{"1", "2"} {
		t.Run(workers+"workers", func(t *testing.T) {
			all, stdout, code := runGotrain(t, 90*time.Second, "train", "mnist", "--nproc-per-node", workers, "--data", data,
				"--batch-size", "512", "--epochs", "2", "--log-every", "0.02")
			if code != 0 {
				t.Fatalf("exit code %d; output:\n%s", code, all)
			}
			if strings.ContainsAny(all, "\r\x1b") {
				t.Fatalf("output has a carriage return or an escape sequence: %q", all)
			}
			for epoch := 1; epoch <= 2; epoch++ {
				re := regexp.MustCompile(fmt.Sprintf(`(?m)^epoch %d/2: \d+ steps train_loss \d\.\d{4} test_acc 0\.\d{4} \d+ samples/s \d+:\d\d$`, epoch))
				if n := len(re.FindAllString(all, -1)); n != 1 {
					t.Fatalf("%d lines for epoch %d matching %v; want 1; output:\n%s", n, epoch, re, all)
				}
			}
			if len(regexp.MustCompile(`(?m)^epoch 1/2 \d+/\d+ (\d+% )?(step \d+/\d+ )?loss \S+ \d+ samples/s`).FindAllString(all, -1)) == 0 {
				t.Fatalf("no periodic progress line with --log-every 0.02; output:\n%s", all)
			}
			if kv := summary(t, stdout); kv["world"] != workers || kv["epochs"] != "2" {
				t.Fatalf("summary %v", kv)
			}
			if bytes.Count([]byte(stdout), []byte("\n")) != 1 {
				t.Fatalf("stdout %q: want the summary alone", stdout)
			}
		})
	}
}
