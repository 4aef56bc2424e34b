package distributed

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/distributed/internal/auth"
	"github.com/gotrain/gotrain/internal/testnet"
	"github.com/gotrain/gotrain/internal/testproc"
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

// TestStoreRefusalFailsRendezvous: a client that the store on rank 0
// refuses for a wrong protocol version (as for a wrong token) cannot
// report itself, so the store records it, and rank 0's rendezvous fails
// with the reason instead of waiting for the rank that will not come.
func TestStoreRefusalFailsRendezvous(t *testing.T) {
	port := strconv.Itoa(testnet.FreePort(t))
	cfg := Config{InitMethod: "tcp://127.0.0.1:" + port, Rank: 0, WorldSize: 2, Token: testToken,
		JobID: t.Name(), ConnectTimeout: 30 * time.Second}
	errc := make(chan error, 1)
	go func() {
		g, err := Init(context.Background(), cfg)
		if g != nil {
			g.Destroy()
		}
		errc <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var c net.Conn
	if !testproc.Poll(10*time.Second, func() bool {
		var err error
		c, err = net.Dial("tcp", "127.0.0.1:"+port)
		return err == nil
	}) {
		t.Fatal("rank 0 never served the store")
	}
	_, err := auth.Client(ctx, c, []byte(testToken), auth.Hello{Version: auth.ProtocolVersion + 1, Role: auth.RoleStore, Rank: -1, WorldSize: -1})
	c.Close()
	if !errors.Is(err, auth.ErrVersion) {
		t.Fatalf("handshake with another version: %v, want auth.ErrVersion", err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "refused a connection") || !strings.Contains(err.Error(), "version") {
			t.Fatalf("rank 0: %v; want the store's refusal for the protocol version", err)
		}
	case <-ctx.Done():
		t.Fatal("rank 0 still waits for its rendezvous after the store refused a rank")
	}
}
