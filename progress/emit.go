package progress

import (
	"encoding/json"
	"fmt"

	"github.com/gotrain/gotrain/event"
)

// Launched reports whether the reporter sends its events to a launcher
// (and Emit reaches it).
func (r *Reporter) Launched() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.events != nil
}

// Emit sends an event of kind with data (encoded as JSON) in its Data
// field to the launcher, which passes the kinds its display does not
// draw to its other consumers (metrics, trace, dashboard). kind must not
// be one the display draws ("epoch", "step", "done"). Not under a
// launcher it does nothing; an encoding error is returned.
func (r *Reporter) Emit(kind string, data any) error {
	switch kind {
	case event.KindEpoch, event.KindStep, event.KindDone, "":
		panic("progress: Emit: kind " + fmt.Sprintf("%q", kind) + " is the display's")
	}
	if !r.Launched() {
		return nil
	}
	b, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("progress: encoding a %s event: %w", kind, err)
	}
	r.send(&event.Event{Kind: kind, Data: b})
	return nil
}
