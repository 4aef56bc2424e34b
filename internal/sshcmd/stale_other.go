//go:build !unix

package sshcmd

// removeStale does nothing where there are no unix sockets to share.
func removeStale(string) {}
