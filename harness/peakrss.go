package harness

import "syscall"

// peakRSSMiB is this process's peak resident set size, the figure to
// compare with a PyTorch rank's; 0 where the system does not report it.
func peakRSSMiB() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Maxrss) / maxrssPerMiB
}
