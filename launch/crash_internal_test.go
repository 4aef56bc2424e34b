package launch

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
)

// goPanic is what Go writes to stderr when a program panics.
const goPanic = "panic: boom\n\ngoroutine 1 [running]:\nmain.main()\n\t/src/main.go:5 +0x25\nexit status 2\n"

// goOOM is what Go's runtime writes when it runs out of memory.
const goOOM = "fatal error: runtime: out of memory\n\nruntime stack:\nruntime.throw({0x4f1c2d?, 0x0?})\n\t/go/src/runtime/panic.go:1101 +0x48\n\ngoroutine 1 gp=0xc000002380 m=0 mp=0x5c3b80 [running]:\nruntime.systemstack_switch()\n"

// filterAll runs text through a crash filter reading one byte at a time
// (Go's runtime writes a report in many small pieces), and returns what
// it yields, the raw copy and the report written.
func filterAll(t *testing.T, text string, oneByte bool) (out, raw, report string, opened int) {
	t.Helper()
	var rawBuf bytes.Buffer
	rep := &closeBuffer{}
	var r io.Reader = strings.NewReader(text)
	if oneByte {
		r = iotest.OneByteReader(r)
	}
	f := newCrashFilter(r, &rawBuf, func() (io.WriteCloser, string, error) {
		opened++
		return rep, "/logs/crash.txt", nil
	})
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), rawBuf.String(), rep.String(), opened
}

type closeBuffer struct {
	bytes.Buffer
	closed bool
}

func (c *closeBuffer) Close() error { c.closed = true; return nil }

func TestCrashFilter(t *testing.T) {
	for _, tc := range []struct {
		name, in, out, report string
	}{
		{"plain lines pass", "one\ntwo\r\npanicky\nfatal errors are fine\npartial", "one\ntwo\r\npanicky\nfatal errors are fine\npartial", ""},
		{"panic", "training\n" + goPanic, "training\npanic: boom (Go runtime crash: goroutine stacks in /logs/crash.txt)\n", goPanic},
		{"out of memory", "step 1\n" + goOOM, "step 1\nfatal error: runtime: out of memory (Go runtime crash: goroutine stacks in /logs/crash.txt)\n", goOOM},
		{"multi-line panic value", "panic: line one\nline two\n\n[signal SIGSEGV: segmentation violation]\n\ngoroutine 7 [running]:\n",
			"panic: line one (Go runtime crash: goroutine stacks in /logs/crash.txt)\n",
			"panic: line one\nline two\n\n[signal SIGSEGV: segmentation violation]\n\ngoroutine 7 [running]:\n"},
		{"a panic line that is no crash", "panic: not Go's\n\nstill running\nmore\n", "panic: not Go's\n\nstill running\nmore\n", ""},
		{"unconfirmed at the end", "fatal error: x\n", "fatal error: x\n", ""},
		{"a false start then a crash", "panic: a\n\nok\n" + goPanic, "panic: a\n\nok\npanic: boom (Go runtime crash: goroutine stacks in /logs/crash.txt)\n", goPanic},
	} {
		for _, oneByte := range []bool{false, true} {
			out, raw, report, opened := filterAll(t, tc.in, oneByte)
			if out != tc.out {
				t.Errorf("%s (one byte %v): yields\n%q\nwant\n%q", tc.name, oneByte, out, tc.out)
			}
			if raw != tc.in {
				t.Errorf("%s: raw copy %q, want the input", tc.name, raw)
			}
			if report != tc.report || (tc.report != "") != (opened == 1) || opened > 1 {
				t.Errorf("%s (one byte %v): report %q (opened %d times), want %q", tc.name, oneByte, report, opened, tc.report)
			}
		}
	}
}

// TestCrashFilterNoFile: without a report file the crash stays on the
// console as written.
func TestCrashFilterNoFile(t *testing.T) {
	f := newCrashFilter(strings.NewReader(goPanic), nil, func() (io.WriteCloser, string, error) {
		return nil, "", errors.New("disk full")
	})
	b, err := io.ReadAll(f)
	if err != nil || string(b) != goPanic {
		t.Fatalf("yields %q, %v; want the crash as written", b, err)
	}
}

// TestCrashReportFile: the report goes beside the worker's logs, or
// without a log directory to a temporary file named by run and rank.
func TestCrashReportFile(t *testing.T) {
	dir := t.TempDir()
	w, path, err := crashReportFile(dir, 1, 5, "job/7", func() int { return 42 })()
	if err != nil || path != filepath.Join(dir, "1", "crash.txt") {
		t.Fatalf("with a log dir: %q, %v", path, err)
	}
	w.Close()
	t.Setenv("TMPDIR", t.TempDir())
	w, path, err = crashReportFile("", 1, 5, "job/7", func() int { return 42 })()
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	if filepath.Dir(path) != os.TempDir() || !strings.HasPrefix(filepath.Base(path), "gotrain-crash-job_7-rank5-pid42-") {
		t.Errorf("without a log dir: %q", path)
	}
}
