package distributed

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/distributed/store"
	"github.com/gotrain/gotrain/internal/testnet"
)

// TestRefusalFailsRendezvous: a node that refuses to start posts why in
// the store; rank 0, waiting for that node's rank, fails at once with
// the reason, as ErrConfig, naming the rank that never joined.
func TestRefusalFailsRendezvous(t *testing.T) {
	port := strconv.Itoa(testnet.FreePort(t))
	addr := "127.0.0.1:" + port
	cfg := Config{InitMethod: "tcp://" + addr, Rank: 0, WorldSize: 2, Token: testToken,
		JobID: t.Name(), ConnectTimeout: 60 * time.Second}
	t.Setenv("GOTRAIN_RESTART_COUNT", "0")
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
	st, err := store.Dial(ctx, addr, []byte(testToken))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// Rank 0 is waiting for rank 1 once it has registered itself.
	if err := st.Wait(ctx, "gotrain/"+t.Name()+"/0/group/rank/0"); err != nil {
		t.Fatal(err)
	}
	posted := time.Now()
	if err := PostRefusal(ctx, st, t.Name(), Refusal{Node: 1, Reason: "--master-addr 127.0.0.1: is a loopback address"}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		took := time.Since(posted)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "node 1 refused: --master-addr 127.0.0.1: is a loopback address") ||
			!strings.Contains(err.Error(), "ranks not joined: 1") {
			t.Fatalf("rank 0: %v; want node 1's refusal and rank 1 not joined", err)
		}
		// Generous for a busy machine: the point is not the 60 s timeout.
		if took > 5*time.Second {
			t.Fatalf("rank 0 failed %v after the refusal", took)
		}
	case <-ctx.Done():
		t.Fatal("rank 0 still waits after node 1's refusal")
	}
}

// TestTimeoutSaysWhatToCheck: when nothing says why (a node that never
// started, or was given an address that leads elsewhere), the ranks fail
// at their connect timeout with what to check: rank 0 names the ranks
// that never reached its store, rank 1 that node 0's store stayed out of
// reach.
func TestTimeoutSaysWhatToCheck(t *testing.T) {
	t.Setenv("GOTRAIN_RESTART_COUNT", "0")
	port := strconv.Itoa(testnet.FreePort(t))
	cfg := Config{InitMethod: "tcp://127.0.0.1:" + port, Rank: 0, WorldSize: 2, Token: testToken,
		JobID: t.Name(), ConnectTimeout: time.Second}
	_, err := Init(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "ranks not joined: 1; they never reached this store: is their node running") {
		t.Errorf("rank 0 alone: %v; want rank 1 named as never reaching the store", err)
	}
	cfg.Rank = 1
	_, err = Init(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "is node 0 running, with the same master address and port as this node?") {
		t.Errorf("rank 1 alone: %v; want node 0's store named as out of reach", err)
	}
}
