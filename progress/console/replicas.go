package console

import (
	"encoding/json"
	"fmt"

	"github.com/gotrain/gotrain/event"
)

// replicasEvent takes a fault-tolerant job's replica change (see
// event.ReplicaChange): its line is printed above the display, and the
// status line shows the replicas left from then on.
func (c *Console) replicasEvent(line []byte) {
	var ev struct{ Data *event.ReplicaChange }
	if json.Unmarshal(line, &ev) != nil || ev.Data == nil || ev.Data.Change == "" {
		return
	}
	ch := ev.Data
	c.mu.Lock()
	c.replicas = fmt.Sprintf("replicas %d/%d", ch.Replicas, ch.Of)
	c.mu.Unlock()
	c.printLines(c.out, true, []byte(ch.Text()+"\n"))
}
