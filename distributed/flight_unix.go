//go:build unix

package distributed

import (
	"os"
	"os/signal"
	"syscall"
)

// dumpOnSignal has the group dump its flight record on each SIGUSR1 (the
// launcher forwards its own), if the config names a directory, until
// Destroy.
func (g *Group) dumpOnSignal() {
	if g.cfg.FlightRecorderDir == "" {
		return
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGUSR1)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-sigs:
				path, err := g.DumpFlightRecorder(g.cfg.FlightRecorderDir, "SIGUSR1")
				if err != nil {
					g.cfg.Logger.Warn("flight recorder dump failed", "rank", g.rank, "err", err)
					continue
				}
				g.cfg.Logger.Info("flight recorder dumped", "rank", g.rank, "file", path, "reason", "SIGUSR1")
			}
		}
	}()
	g.stopSignal = func() {
		signal.Stop(sigs)
		close(stop)
		<-done
	}
}
