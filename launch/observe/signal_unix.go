//go:build unix

package observe

import (
	"os"
	"os/signal"
	"syscall"
)

// forwardSIGUSR1 passes each SIGUSR1 the launcher gets on to the workers
// that said hello, which dump their flight recorders (see
// distributed.Config.FlightRecorderDir).
func (h *Hub) forwardSIGUSR1() {
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
				pids := h.pids()
				h.log.Info("SIGUSR1: asking the workers to dump their flight recorders", "pids", pids)
				for _, pid := range pids {
					_ = syscall.Kill(pid, syscall.SIGUSR1) // one that has exited has nothing to dump
				}
			}
		}
	}()
	h.stopSig = func() {
		signal.Stop(sigs)
		close(stop)
		<-done
	}
}
