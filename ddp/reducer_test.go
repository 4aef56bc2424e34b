package ddp

import (
	"reflect"
	"testing"
)

func TestAssignBucketsFollowsPyTorchCaps(t *testing.T) {
	// 4-byte elements: first cap 16 bytes = 4 elements, then 32 bytes = 8.
	numel := []int{3, 2, 5, 4, 1, 9}
	order := []int{5, 4, 3, 2, 1, 0} // reverse registration order
	got := assignBuckets(order, numel, 16, 32)
	want := []bucketPlan{
		{params: []int{5}, offsets: []int{0}, size: 9},
		{params: []int{4, 3, 2}, offsets: []int{0, 1, 5}, size: 10},
		{params: []int{1, 0}, offsets: []int{0, 2}, size: 5},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("buckets\n got %+v\nwant %+v", got, want)
	}
}

func TestReducerLaunchesBucketsInOrder(t *testing.T) {
	plans := []bucketPlan{
		{params: []int{3, 2}, offsets: []int{0, 1}, size: 2},
		{params: []int{1, 0}, offsets: []int{0, 1}, size: 2},
	}
	r := newReducer(plans, 4)
	step := func(p int, want []int) {
		t.Helper()
		got, err := r.markReady(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) || (len(want) > 0 && !reflect.DeepEqual(got, want)) {
			t.Fatalf("markReady(%d) launched %v, want %v", p, got, want)
		}
	}
	// Bucket 1 completes first but must wait for bucket 0.
	step(1, nil)
	step(0, nil)
	step(3, nil)
	step(2, []int{0, 1})
	if !r.allLaunched() {
		t.Fatal("not all buckets launched")
	}
	if _, err := r.markReady(2); err == nil {
		t.Fatal("marking a parameter ready twice was accepted")
	}
	r.reset()
	step(3, nil)
	if got := r.notReady(); !reflect.DeepEqual(got, []int{0, 1, 2}) {
		t.Fatalf("notReady = %v", got)
	}
}
