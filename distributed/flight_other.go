//go:build !unix

package distributed

// dumpOnSignal does nothing where there is no SIGUSR1.
func (g *Group) dumpOnSignal() {}
