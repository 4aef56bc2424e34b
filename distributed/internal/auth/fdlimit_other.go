//go:build !unix

package auth

// fdLimit is a conservative guess where the limit cannot be read.
func fdLimit() int { return 512 }
