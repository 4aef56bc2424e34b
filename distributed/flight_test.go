package distributed

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestFlightRecordAndBytesSent checks that every collective lands in the
// ring with its identity and state, that the ring keeps only the last
// FlightRecorderSize, and that bytes sent are counted per peer.
func TestFlightRecordAndBytesSent(t *testing.T) {
	t.Setenv("GOTRAIN_SHM", "0")
	runGroup(t, 2, nil, func(ctx context.Context, g *Group) error {
		buf := make([]float32, 1000)
		for i := 0; i < FlightRecorderSize+10; i++ {
			if err := g.AllReduce(ctx, buf, Sum); err != nil {
				return err
			}
		}
		if err := g.Broadcast(ctx, []int64{1, 2, 3}, 1); err != nil {
			return err
		}
		recs := g.FlightRecord()
		if len(recs) != FlightRecorderSize {
			return fmt.Errorf("%d records, want %d", len(recs), FlightRecorderSize)
		}
		last := recs[len(recs)-1]
		if last.Op != "broadcast" || last.Root != 1 || last.Count != 3 || last.DType != "int64" || last.State != StateCompleted || last.End < last.Start {
			return fmt.Errorf("last record %+v", last)
		}
		first := recs[0]
		if first.Op != "allreduce" || first.Count != 1000 || first.DType != "float32" || first.Seq+FlightRecorderSize != last.Seq+1 {
			return fmt.Errorf("first record %+v (last seq %d)", first, last.Seq)
		}
		sent := g.BytesSent(nil)
		peer := 1 - g.Rank()
		if len(sent) != 2 || sent[g.Rank()] != 0 || sent[peer] < int64(4*1000*(FlightRecorderSize+10)/2) {
			return fmt.Errorf("bytes sent %v", sent)
		}
		dir := t.TempDir()
		path, err := g.DumpFlightRecorder(dir, "test")
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var d FlightDump
		if err := json.Unmarshal(b, &d); err != nil {
			return err
		}
		if filepath.Base(path) != fmt.Sprintf("flight_rank%d.json", g.Rank()) || d.Rank != g.Rank() || d.World != 2 || d.Reason != "test" || len(d.Records) != FlightRecorderSize {
			return fmt.Errorf("dump %s: rank %d world %d reason %q, %d records", path, d.Rank, d.World, d.Reason, len(d.Records))
		}
		return nil
	})
}

// BenchmarkFlightRecorder is the cost the recorder adds to each operation.
func BenchmarkFlightRecorder(b *testing.B) {
	var f flightRecorder
	d := &opDesc{kind: opAllReduce, dt: float32T, count: 100, root: -1, peer: -1}
	for i := 0; i < b.N; i++ {
		d.seq = uint64(i)
		f.end(f.begin(d), nil)
	}
}
