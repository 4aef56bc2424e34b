// Package option applies a constructor's functional options the one way
// gotrain's packages share: every option records its name as it runs, and
// a constructor given an option it does not take, or a nil one, panics
// with the package, constructor and option named. A package keeps one
// Option type for all its constructors (an option such as data.DropLast
// can serve several), so this check is what tells them apart.
package option

import (
	"fmt"
	"slices"
)

// Given records the names of the options applied to a config; a
// package's config struct embeds it and each option calls Mark.
type Given struct {
	names []string
}

// Mark records that the option called name was applied.
func (g *Given) Mark(name string) { g.names = append(g.names, name) }

// Apply runs opts over cfg, then panics if one of them was nil or is not
// among takes. pkg and ctor name the caller in the message, as in
// "nn: Linear does not take option Stride". given is cfg's record of
// applied options.
func Apply[C any, O ~func(*C)](pkg, ctor string, cfg *C, given *Given, opts []O, takes ...string) {
	for _, o := range opts {
		if o == nil {
			panic(fmt.Sprintf("%s: %s: nil Option", pkg, ctor))
		}
		o(cfg)
	}
	for _, name := range given.names {
		if !slices.Contains(takes, name) {
			panic(fmt.Sprintf("%s: %s does not take option %s", pkg, ctor, name))
		}
	}
}
