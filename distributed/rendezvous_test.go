package distributed

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestMasterAddrChecks: a master address that cannot be right is refused
// by Init with ErrConfig before anything waits, naming the reason.
func TestMasterAddrChecks(t *testing.T) {
	for _, tc := range []struct {
		name              string
		method, addr, lws string
		want              string
	}{
		{"port in MASTER_ADDR", "env://", "node0:29500", "2", "put the host (node0) there and the port (29500) in MASTER_PORT"},
		{"IPv6 with port", "env://", "[::1]:29500", "2", "holds a port"},
		{"empty, multi-node", "env://", "", "1", "is empty in a multi-node job"},
		{"loopback, multi-node", "env://", "127.0.0.1", "1", "is a loopback address in a multi-node job"},
		{"localhost, multi-node", "env://", "localhost", "1", "loopback"},
		{"tcp:// loopback, multi-node", "tcp://127.0.0.1:29500", "", "1", "is a loopback address in a multi-node job"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("MASTER_ADDR", tc.addr)
			t.Setenv("MASTER_PORT", "29500")
			t.Setenv("LOCAL_WORLD_SIZE", tc.lws)
			t.Setenv("GOTRAIN_ALLOW_LOOPBACK", "")
			_, err := Init(context.Background(), Config{InitMethod: tc.method, Rank: 1, WorldSize: 2})
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Init: %v; want ErrConfig saying %q", err, tc.want)
			}
		})
	}
}
