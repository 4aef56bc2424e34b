package fanout_test

import (
	"context"
	"fmt"
	"os"

	"github.com/gotrain/gotrain/launch/fanout"
	"github.com/gotrain/gotrain/launch/hosts"
	"github.com/gotrain/gotrain/launch/ssh"
)

// Two hosts of two workers each, reached with the user's ssh; gotrain and
// the program are at the same paths on every host.
func ExampleRun() {
	hs, err := hosts.Parse("node0:2,node1:2")
	if err != nil {
		panic(err)
	}
	code, err := fanout.Run(context.Background(), fanout.Config{
		Hosts:       hs,
		SSH:         ssh.Client{Options: []string{"ConnectTimeout=5"}},
		Program:     "/opt/train/mytrainer",
		Args:        []string{"--epochs", "5"},
		MaxRestarts: 1,
		Env:         fanout.ForwardEnv(os.Environ()),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

func ExampleForwardEnv() {
	fmt.Println(fanout.ForwardEnv([]string{"HOME=/home/me", "GOTRAIN_SOCKET_IFNAME=eth1", "GOTRAIN_TOKEN=t", "GLOO_SOCKET_IFNAME=eth1"}))
	// Output: [GOTRAIN_SOCKET_IFNAME=eth1 GLOO_SOCKET_IFNAME=eth1]
}

// Hosts with their own slots run their own numbers of workers, ranked in
// host order; --nproc-per-node (NProcPerNode) overrides them all.
func ExampleConfig_Workers() {
	hs, err := hosts.Parse("node0:1,node1:4,node2")
	if err != nil {
		panic(err)
	}
	cfg := fanout.Config{Hosts: hs}
	fmt.Println(cfg.Workers())
	cfg.NProcPerNode = 2
	fmt.Println(cfg.Workers())
	// Output:
	// [1 4 1]
	// [2 2 2]
}
