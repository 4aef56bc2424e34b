package ssh_test

import (
	"fmt"
	"strings"

	"github.com/gotrain/gotrain/launch/ssh"
)

func ExampleClient_Multiplex() {
	c, end, err := ssh.Client{Options: []string{"Port=2222"}}.Multiplex()
	if err != nil {
		fmt.Println(err)
		return
	}
	// Every command to node1 from c now shares one connection; end closes
	// it (ssh -O exit) and removes its socket's directory.
	defer end()
	for _, a := range c.Args("node1", "true") {
		if strings.HasPrefix(a, "Control") {
			k, _, _ := strings.Cut(a, "=")
			fmt.Println(k)
		}
	}
	// Output:
	// ControlMaster
	// ControlPath
	// ControlPersist
}
