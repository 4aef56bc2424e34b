package event

import "fmt"

// KindReplicas is the kind of the event a fault-tolerant job's worker
// sends when the replicas change: Data is a ReplicaChange. The replica
// that is rank 0 of the new quorum sends it, one event per change.
const KindReplicas = "replicas"

// The changes of a ReplicaChange.
const (
	ReplicaJoined = "joined" // a new replica is in the quorum
	ReplicaLeft   = "left"   // a replica died or was cut off: the others train on
	ReplicaHealed = "healed" // a replica (a restarted or new one) took a peer's state
)

// ReplicaChange is one change of a fault-tolerant job's replicas.
type ReplicaChange struct {
	Change   string `json:"change"`           // ReplicaJoined, ReplicaLeft or ReplicaHealed
	Replica  string `json:"replica"`          // its replica ID
	Replicas int    `json:"replicas"`         // the replicas in the quorum after the change
	Of       int    `json:"of"`               // the replicas the job started with
	Step     int64  `json:"step"`             // the step the quorum trains from
	Source   string `json:"source,omitempty"` // ReplicaHealed: the peer it healed from
}

// Text is the change as a line for people: "replica vm-001 left: 2/3
// replicas at step 120".
func (c ReplicaChange) Text() string {
	what := c.Change
	if c.Change == ReplicaHealed && c.Source != "" {
		what += " from " + c.Source
	}
	return fmt.Sprintf("replica %s %s: %d/%d replicas at step %d", c.Replica, what, c.Replicas, c.Of, c.Step)
}
