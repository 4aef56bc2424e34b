//go:build !unix

package progress

func closeOnExec(int) {}

// isPipe: the launcher's pipe is a Unix facility.
func isPipe(int) bool { return false }
