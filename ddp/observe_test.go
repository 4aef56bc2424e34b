package ddp

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/gotrain/gotrain/nn"
)

// TestObserveBuckets: with an observer every bucket's reduction is
// reported once per backward (both when reductions overlap backward and
// when they run inline), in order queued ≤ start ≤ end, with its
// size; after ObserveBuckets(nil) nothing is.
func TestObserveBuckets(t *testing.T) {
	for _, overlap := range []bool{true, false} {
		t.Run(fmt.Sprintf("overlap=%v", overlap), func(t *testing.T) { testObserveBuckets(t, overlap) })
	}
}

func testObserveBuckets(t *testing.T, overlap bool) {
	errs := runRanks(2, func(rank int, g Group) error {
		m := smallModel(1)
		dm, err := New(context.Background(), m, g, BucketCapMB(0.0001), OverlapComm(overlap))
		if err != nil {
			return err
		}
		defer dm.Close()
		var mu sync.Mutex
		var spans []BucketSpan
		dm.ObserveBuckets(func(b BucketSpan) {
			mu.Lock()
			spans = append(spans, b)
			mu.Unlock()
		})
		xs, ys := fixedData(perRank)
		x, y := slice(xs, ys, 0, perRank)
		step := func() error {
			return nn.CrossEntropy(dm.Forward(x), y).Backward()
		}
		// The first pass rebuilds the buckets: count those after it.
		if err := step(); err != nil {
			return err
		}
		mu.Lock()
		first := len(spans)
		mu.Unlock()
		for range 2 {
			if err := step(); err != nil {
				return err
			}
		}
		mu.Lock()
		got := append([]BucketSpan(nil), spans...)
		mu.Unlock()
		buckets := dm.Stats().Buckets
		if buckets < 2 || first < 1 || len(got)-first != 2*buckets {
			return fmt.Errorf("%d spans for 2 passes of %d buckets", len(got)-first, buckets)
		}
		total := 0
		for _, p := range dm.Parameters() {
			total += 4 * p.Len()
		}
		sum := 0
		for _, b := range got[len(got)-buckets:] {
			if b.Queued.IsZero() || b.Start.Before(b.Queued) || b.End.Before(b.Start) || b.Err != nil || b.Bytes <= 0 {
				return fmt.Errorf("span %+v", b)
			}
			sum += b.Bytes
		}
		if sum != total {
			return fmt.Errorf("the last pass's buckets hold %d bytes, the gradients %d", sum, total)
		}
		dm.ObserveBuckets(nil)
		if err := step(); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if len(spans) != len(got) {
			return fmt.Errorf("%d spans reported after ObserveBuckets(nil)", len(spans)-len(got))
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}
