package ddp

import (
	"fmt"
	"testing"
)

func TestInvalidOptionsPanic(t *testing.T) {
	for name, c := range map[string]struct {
		f    func()
		want string
	}{
		"zero cap":      {func() { BucketCapMB(0) }, "ddp: BucketCapMB(0): the cap must be at least one byte"},
		"negative cap":  {func() { BucketCapMB(-1) }, "ddp: BucketCapMB(-1): the cap must be at least one byte"},
		"sub-byte cap":  {func() { BucketCapMB(0.5 / (1 << 20)) }, "ddp: BucketCapMB(4.76837158203125e-07): the cap must be at least one byte"},
		"nil comm hook": {func() { WithCommHook(nil) }, "ddp: WithCommHook: nil hook"},
	} {
		func() {
			defer func() {
				if r := fmt.Sprint(recover()); r != c.want {
					t.Errorf("%s: recovered %q, want %q", name, r, c.want)
				}
			}()
			c.f()
		}()
	}
	BucketCapMB(1.0 / (1 << 20)) // one byte is a valid cap
}
