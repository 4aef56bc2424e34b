package jobflag

import (
	"testing"

	"github.com/spf13/pflag"
)

func TestOptionalValues(t *testing.T) {
	var x *float64
	var n *int
	f := pflag.NewFlagSet("t", pflag.ContinueOnError)
	f.Var(Float(&x, new(0.9)), "x", "")
	f.Var(Int(&n, nil), "n", "")
	if d := f.Lookup("x").DefValue; d != "0.9" {
		t.Errorf("default shown %q, want the Config's 0.9", d)
	}
	if err := f.Parse(nil); err != nil || x != nil || n != nil {
		t.Fatalf("left out: %v, %v, %v; want nil fields, the defaults", err, x, n)
	}
	if err := f.Parse([]string{"--x", "0", "--n", "0"}); err != nil || x == nil || *x != 0 || n == nil || *n != 0 {
		t.Fatalf("given 0: %v, %v, %v; want fields pointing at 0", err, x, n)
	}
	if err := f.Parse([]string{"--x", "fast"}); err == nil {
		t.Error("--x fast parsed")
	}
}

func TestErrors(t *testing.T) {
	for err, want := range map[error]string{
		Bad("lr", 0.0, "must be a number greater than 0"): "--lr 0: must be a number greater than 0",
		Bad("data", "my file", "is empty"):                `--data "my file": is empty`,
		Needs("resume", "needs --save"):                   "--resume: needs --save",
		AtLeast("epochs", 0, 1):                           "--epochs 0: must be at least 1",
		OneOf("model", "resnet", "mlp", "cnn"):            "--model resnet: must be mlp or cnn",
	} {
		if err == nil || err.Error() != want {
			t.Errorf("%v, want %q", err, want)
		}
	}
}
