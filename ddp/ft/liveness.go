package ft

import "time"

// liveness tells live replicas from dead ones by their heartbeat
// counters: a replica whose counter has not moved for the bound is dead.
// A replica first seen counts as alive for one bound, so that a replica
// that never beats is found dead within it.
type liveness struct {
	bound time.Duration
	seen  map[string]beat
}

type beat struct {
	value   int64
	changed time.Time
}

func newLiveness(bound time.Duration) *liveness {
	return &liveness{bound: bound, seen: map[string]beat{}}
}

// observe records id's counter as read at now.
func (l *liveness) observe(id string, value int64, now time.Time) {
	b, ok := l.seen[id]
	if !ok || b.value != value {
		l.seen[id] = beat{value, now}
	}
}

// alive reports whether id's counter moved within the bound before now.
func (l *liveness) alive(id string, now time.Time) bool {
	b, ok := l.seen[id]
	return !ok || now.Sub(b.changed) < l.bound
}
