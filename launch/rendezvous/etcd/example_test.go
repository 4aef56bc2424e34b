package etcd_test

import (
	"context"
	"fmt"

	"github.com/gotrain/gotrain/launch/rendezvous"
	"github.com/gotrain/gotrain/launch/rendezvous/etcd"
)

// A node of job-42 joins its rendezvous in etcd; gotrain run does this
// for --rdzv-backend etcd --rdzv-endpoint etcd1:2379 --rdzv-id job-42.
func Example() {
	ctx := context.Background()
	b, err := etcd.Dial(ctx, []string{"etcd1:2379"}, "job-42", 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	r, err := rendezvous.New(ctx, b, rendezvous.Config{RunID: "job-42", MinNodes: 2, MaxNodes: 4, Addr: "10.0.0.7"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close() // and closes b
	rd, err := r.Next(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("node rank", rd.NodeRank, "of", rd.NNodes())
}
