package hosts_test

import (
	"fmt"
	"strings"

	"github.com/gotrain/gotrain/launch/hosts"
)

func ExampleParse() {
	hs, err := hosts.Parse("node0:2,alice@node1:4")
	if err != nil {
		panic(err)
	}
	for rank, h := range hs {
		fmt.Printf("node %d: %s, %d slots\n", rank, h.Name, h.Slots)
	}
	// Output:
	// node 0: node0, 2 slots
	// node 1: alice@node1, 4 slots
}

func ExampleParseFile() {
	hs, err := hosts.ParseFile(strings.NewReader("node0 slots=2 # head\nnode1 slots=2\n"), "hostfile")
	fmt.Println(hs, err)
	// Output: [node0:2 node1:2] <nil>
}
