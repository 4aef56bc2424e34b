package harness

// maxrssPerMiB converts getrusage's ru_maxrss, in bytes on macOS.
const maxrssPerMiB = 1 << 20
