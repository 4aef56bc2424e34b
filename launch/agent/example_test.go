package agent_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/gotrain/gotrain/launch/agent"
)

// An agent runs node 1 of a two-node job: told to start attempt 0, it
// runs the worker and reports its output and its end.
func ExampleRun() {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	go func() {
		defer outW.Close()
		_ = agent.Run(context.Background(), inR, outW, []string{"PATH=/usr/bin:/bin"})
	}()
	go func() {
		// Written as the agent reads, since io.Pipe has no buffer.
		enc := json.NewEncoder(inW)
		_ = enc.Encode(agent.Job{Host: "node1", Program: "sh", Args: []string{"-c", "echo hello from rank $RANK of $WORLD_SIZE"},
			Token: "a-secret", NodeRank: 1, NNodes: 2, NProcPerNode: 1, MasterAddr: "node0", MasterPort: 29500})
		_ = enc.Encode(agent.Message{Type: agent.Start, Restart: 0})
	}()
	sc := bufio.NewScanner(outR)
	for sc.Scan() {
		var m agent.Message
		_ = json.Unmarshal(sc.Bytes(), &m)
		switch {
		case m.Type == agent.Output && m.Stream == 1:
			fmt.Print(string(m.Data))
		case m.Type == agent.Exit:
			fmt.Println("attempt", m.Restart, "exit code", m.Code)
			inW.Close() // the end of stdin ends the agent
		}
	}
	// Output:
	// [rank1]: hello from rank 1 of 2
	// attempt 0 exit code 0
}
