package launch

import (
	"log/slog"

	"github.com/gotrain/gotrain/distributed/shm"
)

// cleanShm removes the /dev/shm files that killed gotrain processes left
// behind. A worker unlinks its shared-memory files as soon as every peer
// has mapped them, but one SIGKILLed in between (by the OOM killer, say)
// or a launcher killed with its workers leaves them, holding memory until
// reboot. cleanShm removes at once those of every earlier job whose
// creator is gone, so this job finds the space, and returns the function
// that removes this job's own when Run ends, however it ends. Files of a
// live process or another user stay (see shm.RemoveStale). Elsewhere than
// on Linux there are no such files and both do nothing.
func cleanShm(log *slog.Logger, runID string) (atExit func()) {
	remove := func(job string) {
		files, bytes, err := shm.RemoveStale(job)
		if files > 0 {
			log.Info("launch: removed shared-memory files of killed processes", "files", files, "MiB", bytes>>20)
		}
		if err != nil {
			log.Warn("launch: could not remove shared-memory files of killed processes", "err", err)
		}
	}
	remove("")
	return func() { remove(runID) }
}
