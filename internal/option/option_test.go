package option

import (
	"strings"
	"testing"
)

type config struct {
	Given
	size int
}

type opt func(*config)

func size(n int) opt { return func(c *config) { c.size = n; c.Mark("Size") } }
func color() opt     { return func(c *config) { c.Mark("Color") } }

func apply(takes []string, opts ...opt) (c config) {
	Apply("pkg", "New", &c, &c.Given, opts, takes...)
	return c
}

func TestApply(t *testing.T) {
	if c := apply([]string{"Size"}, size(3)); c.size != 3 {
		t.Fatalf("size = %d, want 3", c.size)
	}
	for _, tc := range []struct {
		opts []opt
		want string
	}{
		{[]opt{size(1), color()}, "pkg: New does not take option Color"},
		{[]opt{nil}, "pkg: New: nil Option"},
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(r.(string), tc.want) {
					t.Errorf("panic %v, want %q", r, tc.want)
				}
			}()
			apply([]string{"Size"}, tc.opts...)
		}()
	}
}
