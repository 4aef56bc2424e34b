//go:build !darwin

package harness

// maxrssPerMiB converts getrusage's ru_maxrss, in KiB on Linux and the
// BSDs.
const maxrssPerMiB = 1 << 10
