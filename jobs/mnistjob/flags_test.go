package mnistjob

import (
	"testing"

	"github.com/spf13/pflag"
)

// TestFlagsTakeConfigDefaults: the flags left out give the Config's
// defaults (and --seed PyTorch's examples' 1), and 0 given where zero is
// a setting of its own means it.
func TestFlagsTakeConfigDefaults(t *testing.T) {
	parse := func(args ...string) Config {
		t.Helper()
		var c Config
		f := pflag.NewFlagSet("train mnist", pflag.ContinueOnError)
		c.RegisterFlags(f)
		if err := f.Parse(args); err != nil {
			t.Fatal(err)
		}
		if err := c.CheckFlags(f); err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		return c
	}
	got, want := parse().withDefaults(), Config{}.withDefaults()
	if got.Model != want.Model || got.Epochs != want.Epochs || got.BatchSize != want.BatchSize || got.LR != want.LR ||
		*got.Momentum != *want.Momentum || *got.Gamma != *want.Gamma || got.CommHook != want.CommHook || got.Seed != flagSeed {
		t.Fatalf("no flags: %+v; want the Config's defaults %+v", got, want)
	}
	c := parse("--momentum", "0", "--gamma", "0", "--model", "cnn", "--optimizer", "sgd")
	if c.Momentum == nil || *c.Momentum != 0 || c.Gamma == nil || *c.Gamma != 0 {
		t.Fatalf("--momentum 0 --gamma 0: momentum %v, gamma %v; want both 0, not the defaults", c.Momentum, c.Gamma)
	}
	if d := parse("--model", "cnn").withDefaults(); d.Optimizer != "adadelta" || *d.Gamma != 0.7 {
		t.Fatalf("--model cnn: optimizer %s, gamma %v; want adadelta's defaults", d.Optimizer, *d.Gamma)
	}
}
