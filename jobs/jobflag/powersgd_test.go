package jobflag

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestPowerSGDFlags(t *testing.T) {
	parse := func(hook string, args ...string) (PowerSGD, error) {
		t.Helper()
		var p PowerSGD
		f := pflag.NewFlagSet("train", pflag.ContinueOnError)
		p.Register(f)
		if err := f.Parse(args); err != nil {
			t.Fatal(err)
		}
		return p, p.Check(f, hook)
	}
	p, err := parse("powersgd")
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.Config()
	if err != nil || c.Rank != 1 || c.StartIter != DefaultPowerSGDStart || c.MinCompressionRate != 2 || !c.ErrorFeedback || !c.WarmStart {
		t.Fatalf("defaults: %+v, %v", c, err)
	}
	if c, _ := (PowerSGD{}).Config(); c.Rank != 1 || c.StartIter != DefaultPowerSGDStart {
		t.Fatalf("the zero PowerSGD is not the flags' defaults: %+v", c)
	}
	p, err = parse("powersgd", "--powersgd-rank", "4", "--powersgd-start-iter", "0", "--powersgd-min-compression-rate", "1.5",
		"--powersgd-no-error-feedback", "--powersgd-no-warm-start")
	if err != nil {
		t.Fatal(err)
	}
	if c, err := p.Config(); err != nil || c.Rank != 4 || c.StartIter != 0 || c.MinCompressionRate != 1.5 || c.ErrorFeedback || c.WarmStart {
		t.Fatalf("flags given: %+v, %v", c, err)
	}
	for _, tc := range []struct {
		hook string
		args []string
		want string
	}{
		{"allreduce", []string{"--powersgd-rank", "2"}, "--powersgd-rank: applies only to --comm-hook powersgd (the comm hook is allreduce)"},
		{"bf16", []string{"--powersgd-no-warm-start"}, "--powersgd-no-warm-start: applies only"},
		{"powersgd", []string{"--powersgd-rank", "0"}, "--powersgd-rank 0: must be at least 1"},
		{"powersgd", []string{"--powersgd-start-iter", "-1"}, "--powersgd-start-iter -1"},
		{"powersgd", []string{"--powersgd-min-compression-rate", "NaN"}, "--powersgd-min-compression-rate NaN"},
	} {
		if _, err := parse(tc.hook, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %q: %v, want %q", tc.hook, tc.args, err, tc.want)
		}
	}
}
