package launch_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/launch"
)

// TestMasterAddrErrors: Run refuses, before any worker starts, a master
// address that cannot work, saying why.
func TestMasterAddrErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		addr  string
		nodes int
		want  string
	}{
		{"port in the address", "node0:29500", 1, "holds a port; give the host and the port apart: --master-addr node0 --master-port 29500"},
		{"empty, two nodes", "", 2, "must be node 0's address in a multi-node job (nnodes 2)"},
		{"loopback, two nodes", "127.0.0.1", 2, "is a loopback address in a multi-node job (nnodes 2)"},
		{"localhost, two nodes", "localhost", 2, "is a loopback address"},
		{"not a host", "a b", 1, "must be a host name or IP address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := newJob(t, 1, "env", nil)
			j.cfg.Standalone, j.cfg.NNodes, j.cfg.MasterAddr = false, tc.nodes, tc.addr
			j.cfg.Env = append(j.cfg.Env, "GOTRAIN_TOKEN=t", launch.EnvAllowLoopback+"=")
			code, err := launch.Run(context.Background(), j.cfg)
			if !errors.Is(err, launch.ErrConfig) || !strings.Contains(err.Error(), tc.want) || code != 1 {
				t.Fatalf("Run = %d, %v; want ErrConfig saying %q", code, err, tc.want)
			}
			if j.stdout.Len() != 0 {
				t.Errorf("a worker ran: %q", j.stdout.String())
			}
		})
	}
}

// TestCheckMasterAddrAccepts: the addresses that can work pass.
func TestCheckMasterAddrAccepts(t *testing.T) {
	for _, tc := range []struct {
		addr          string
		nodes         int
		allowLoopback bool
	}{
		{"10.0.0.1", 2, false},
		{"node0", 4, false},
		{"fe80::1", 2, false},
		{"127.0.0.1", 1, false},
		{"", 1, false}, // one node: 127.0.0.1
		{"127.0.0.1", 2, true},
	} {
		if err := launch.CheckMasterAddr(tc.addr, tc.nodes, tc.allowLoopback); err != nil {
			t.Errorf("CheckMasterAddr(%q, %d, %v) = %v, want nil", tc.addr, tc.nodes, tc.allowLoopback, err)
		}
	}
}
