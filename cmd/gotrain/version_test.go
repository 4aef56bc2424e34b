package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestVersion: `gotrain version` and `gotrain --version` name the Go
// version, the platform and the sha256 of the running executable.
func TestVersion(t *testing.T) {
	exe, err := os.Executable() // the test binary runs as gotrain
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	for _, args := range [][]string{{"version"}, {"--version"}} {
		all, out, code := runGotrain(t, 30*time.Second, args...)
		if code != 0 || all != out {
			t.Fatalf("gotrain %s: exit %d, output:\n%s", args[0], code, all)
		}
		for _, want := range []string{"gotrain ", "\ngo: " + runtime.Version() + "\n", "\nrevision: ",
			"\nplatform: " + runtime.GOOS + "/" + runtime.GOARCH + "\n", "\nsha256: " + hex.EncodeToString(sum[:]) + "\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("gotrain %s lacks %q:\n%s", args[0], want, out)
			}
		}
	}
}

// TestGuard: a panic in the command is one error line naming a report
// file that holds the value and the stack.
func TestGuard(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	err := guard(func() error { panic("tensor: shape mismatch\n[2 3] vs [3 2]") })
	var pe *panicError
	if !errors.As(err, &pe) || pe.report == "" {
		t.Fatalf("guard = %v, want a *panicError with a report", err)
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "internal error: tensor: shape mismatch [2 3] vs [3 2] (stack in "+os.TempDir()) {
		t.Errorf("error %q", msg)
	}
	report, err := os.ReadFile(pe.report)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(report), "panic: tensor: shape mismatch\n") || !strings.Contains(string(report), "goroutine ") || !strings.Contains(string(report), "TestGuard") {
		t.Errorf("report:\n%s", report)
	}
	if err := guard(func() error { return errUsageForTest }); err != errUsageForTest {
		t.Errorf("guard passed %v on, want the function's error", err)
	}
}

var errUsageForTest = usagef("a usage error")
