package observe

import (
	"encoding/json"
	"slices"

	"github.com/gotrain/gotrain/event"
)

// maxReplicaChanges bounds the replica changes the dashboard keeps.
const maxReplicaChanges = 1000

// Replicas is a fault-tolerant job's membership as the dashboard shows
// it: the replicas in the latest quorum, of those the job started with,
// and every change, oldest first.
type Replicas struct {
	Live    int                   `json:"live"`
	Of      int                   `json:"of"`
	Changes []event.ReplicaChange `json:"changes"`
}

// replicasEvent takes a replica change (event.KindReplicas); h.mu is not
// held.
func (h *Hub) replicasEvent(line []byte) {
	var ev struct{ Data *event.ReplicaChange }
	if json.Unmarshal(line, &ev) != nil || ev.Data == nil || ev.Data.Change == "" {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.replicas == nil {
		h.replicas = &Replicas{}
	}
	r := h.replicas
	r.Live, r.Of = ev.Data.Replicas, ev.Data.Of
	if len(r.Changes) >= maxReplicaChanges {
		r.Changes = slices.Delete(r.Changes, 0, len(r.Changes)-maxReplicaChanges+1)
	}
	r.Changes = append(r.Changes, *ev.Data)
	h.version++
}

// replicasSnapshot is a copy of the membership, nil if no replica
// changed; h.mu is held.
func (h *Hub) replicasSnapshot() *Replicas {
	if h.replicas == nil {
		return nil
	}
	r := *h.replicas
	r.Changes = slices.Clone(r.Changes)
	return &r
}
