//go:build !unix

package observe

// forwardSIGUSR1 does nothing where there is no SIGUSR1.
func (h *Hub) forwardSIGUSR1() {}
