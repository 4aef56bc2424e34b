package ddp

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/distributed/store"
	"github.com/gotrain/gotrain/internal/testproc"
	"github.com/gotrain/gotrain/nn"
)

// sigtermWorker wraps smallModel under a context that SIGTERM cancels.
// Rank 1 runs a backward pass whose reduction rank 0 never joins (rank 0
// waits for the signal), and reports how long Backward took to return.
func sigtermWorker() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	rank, _ := strconv.Atoi(os.Getenv("RANK"))
	g, err := distributed.Init(ctx, distributed.Config{InitMethod: "env://", AgentStore: true, Timeout: 60 * time.Second})
	if err != nil {
		return err
	}
	defer g.Destroy()
	dm, err := New(ctx, smallModel(1), g)
	if err != nil {
		return err
	}
	defer dm.Close()
	if rank == 0 {
		<-ctx.Done()
		return nil
	}
	xs, ys := fixedData(perRank)
	x, y := slice(xs, ys, 0, perRank)
	start := time.Now()
	errc := make(chan error, 1)
	go func() { errc <- nn.CrossEntropy(dm.Forward(x), y).Backward() }()
	// "backward" once a reduction has started, which waits for rank 0.
	if !testproc.Poll(30*time.Second, func() bool { return reducing(g) }) {
		return fmt.Errorf("Backward started no reduction")
	}
	fmt.Println("backward")
	err = <-errc
	fmt.Printf("returned after %v: %v\n", time.Since(start).Round(time.Millisecond), err)
	return err
}

// reducing reports whether g's flight recorder shows a collective that
// has started and not ended.
func reducing(g *distributed.Group) bool {
	for _, r := range g.FlightRecord() {
		if r.State == distributed.StateStarted {
			return true
		}
	}
	return false
}

// TestMultiProcessSIGTERMStopsBackward: SIGTERM to a rank whose Backward
// waits for a peer makes Backward return within a second (the context
// given to New bounds the reductions), not after the operation timeout.
func TestMultiProcessSIGTERMStopsBackward(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	for _, shm := range []string{"1", "0"} {
		t.Run("shm="+shm, func(t *testing.T) {
			srv, err := store.Listen("127.0.0.1:0", []byte(testToken))
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			host, port, _ := strings.Cut(srv.Addr().String(), ":")
			ws := testproc.Start(t, "ddp-sigterm", 2, testproc.Options{
				Env: []string{"MASTER_ADDR=" + host, "MASTER_PORT=" + port, "GOTRAIN_TOKEN=" + testToken,
					"GOTRAIN_RUN_ID=" + t.Name(), "GOTRAIN_SHM=" + shm},
			}).Procs()
			const victim = 1
			if _, ok := ws[victim].WaitLine("backward", 30*time.Second); !ok {
				t.Fatalf("rank %d never reached Backward", victim)
			}
			sent := time.Now()
			if err := ws[victim].Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			l, ok := ws[victim].WaitLine("returned after", 70*time.Second)
			if !ok {
				t.Fatalf("Backward did not return after SIGTERM")
			}
			d := l.At.Sub(sent)
			t.Logf("%v after SIGTERM: %s", d.Round(time.Millisecond), l.Text)
			if d > time.Second {
				t.Errorf("Backward returned %v after SIGTERM, want ≤ 1 s", d)
			}
			if !strings.Contains(l.Text, "context canceled") {
				t.Errorf("Backward's error does not say the context was cancelled: %s", l.Text)
			}
			for _, w := range ws {
				w.Signal(syscall.SIGTERM)
				<-w.Done()
			}
		})
	}
}
