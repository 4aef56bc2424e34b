package main

import (
	"os"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestTimeoutFlag: --timeout becomes the workers' GOTRAIN_TIMEOUT; a
// non-positive one is refused naming the flag; without it the
// environment is left alone.
func TestTimeoutFlag(t *testing.T) {
	parse := func(args ...string) (timeoutFlag, *pflag.FlagSet) {
		var tf timeoutFlag
		f := pflag.NewFlagSet("t", pflag.ContinueOnError)
		tf.register(f)
		if err := f.Parse(args); err != nil {
			t.Fatal(err)
		}
		return tf, f
	}
	t.Setenv("GOTRAIN_TIMEOUT", "7m")
	tf, f := parse()
	if err := tf.check(f); err != nil {
		t.Fatal(err)
	}
	tf.export()
	if got := os.Getenv("GOTRAIN_TIMEOUT"); got != "7m" {
		t.Errorf("without --timeout: GOTRAIN_TIMEOUT=%q, want the caller's 7m", got)
	}
	tf, f = parse("--timeout", "90s")
	if err := tf.check(f); err != nil {
		t.Fatal(err)
	}
	tf.export()
	if got := os.Getenv("GOTRAIN_TIMEOUT"); got != "1m30s" {
		t.Errorf("--timeout 90s: GOTRAIN_TIMEOUT=%q, want 1m30s", got)
	}
	for _, v := range []string{"0s", "-1s"} {
		tf, f = parse("--timeout", v)
		if err := tf.check(f); err == nil || !strings.Contains(err.Error(), "--timeout") {
			t.Errorf("--timeout %s: got %v, want an error naming --timeout", v, err)
		}
	}
}
