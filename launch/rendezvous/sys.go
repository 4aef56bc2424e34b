package rendezvous

import (
	"crypto/rand"
	"encoding/hex"
	"os"
)

var (
	osHostname = os.Hostname
	osGetpid   = os.Getpid
)

// randomSuffix makes node ids unique when a host restarts a launcher
// with the pid of an earlier one.
func randomSuffix() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}
