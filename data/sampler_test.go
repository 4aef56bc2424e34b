package data

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
)

func TestSequentialSampler(t *testing.T) {
	s := NewSequentialSampler(5)
	if got := s.AppendIndices([]int{9}); !slices.Equal(got, []int{9, 0, 1, 2, 3, 4}) {
		t.Fatalf("AppendIndices = %v", got)
	}
	if s.Len() != 5 || len(NewSequentialSampler(0).AppendIndices(nil)) != 0 {
		t.Fatal("wrong length")
	}
}

func TestRandomSampler(t *testing.T) {
	s := NewRandomSampler(100, 1)
	a := s.AppendIndices(nil)
	if b := s.AppendIndices(nil); !slices.Equal(a, b) {
		t.Fatal("same epoch gave a different order")
	}
	s.SetEpoch(1)
	b := s.AppendIndices(nil)
	if slices.Equal(a, b) {
		t.Fatal("SetEpoch did not change the order")
	}
	slices.Sort(b)
	for i, v := range b {
		if v != i {
			t.Fatal("not a permutation")
		}
	}
	if c := NewRandomSampler(100, 2).AppendIndices(nil); slices.Equal(a, c) {
		t.Fatal("seed did not change the order")
	}
}

// samplerFactories builds equal samplers of each kind, so resume tests can
// restore into a fresh one.
var samplerFactories = map[string]func() ResumableSampler{
	"sequential":  func() ResumableSampler { return NewSequentialSampler(103) },
	"random":      func() ResumableSampler { return NewRandomSampler(103, 9) },
	"distributed": func() ResumableSampler { return NewDistributedSampler(103, 3, 1, Seed(9)) },
}

// TestResumeMidEpoch stops a loop after some batches, saves the state as
// JSON as a checkpoint would, restores it into a fresh sampler, and checks
// the resumed loop visits exactly the rest of the epoch.
func TestResumeMidEpoch(t *testing.T) {
	for name, newSampler := range samplerFactories {
		for _, prefetch := range []int{0, 2} {
			s := newSampler()
			setEpoch(s, 2)
			full := s.AppendIndices(nil)

			s = newSampler()
			setEpoch(s, 2)
			ds := indexDataset(103)
			var first []int
			for b := range NewLoader(ds, 8, s, Prefetch(prefetch)).Batches() {
				first = append(first, b.Indices...)
				if len(first) == 24 {
					break
				}
			}
			saved, err := json.Marshal(s.State())
			if err != nil {
				t.Fatal(err)
			}

			var st SamplerState
			if err := json.Unmarshal(saved, &st); err != nil {
				t.Fatal(err)
			}
			if st.Epoch != 2 || st.Seen != 24 {
				t.Fatalf("%s: state %+v after 3 batches of 8 in epoch 2", name, st)
			}
			r := newSampler()
			if err := r.Restore(st); err != nil {
				t.Fatal(err)
			}
			setEpoch(r, st.Epoch) // the resumed epoch loop sets the same epoch
			var rest []int
			for b := range NewLoader(ds, 8, r, Prefetch(prefetch)).Batches() {
				rest = append(rest, b.Indices...)
			}
			if got := append(first, rest...); !slices.Equal(got, full) {
				t.Fatalf("%s prefetch %d: resumed epoch %v\nwant %v", name, prefetch, got, full)
			}
			if st := r.State(); st.Seen != len(full) {
				t.Fatalf("%s: Seen %d after the epoch, want %d", name, st.Seen, len(full))
			}
			setEpoch(r, 3)
			if got := r.AppendIndices(nil); len(got) != len(full) || r.State().Seen != 0 {
				t.Fatalf("%s: the next epoch skipped indices", name)
			}
		}
	}
}

func setEpoch(s Sampler, epoch int) { s.(interface{ SetEpoch(int) }).SetEpoch(epoch) }

func TestRestoreToOtherEpochDropsPosition(t *testing.T) {
	s := NewRandomSampler(10, 0)
	if err := s.Restore(SamplerState{Epoch: 4, Seen: 5}); err != nil {
		t.Fatal(err)
	}
	s.SetEpoch(5)
	if got := s.AppendIndices(nil); len(got) != 10 {
		t.Fatalf("epoch 5 visited %d indices, want all 10", len(got))
	}
}

func TestRestoreRejectsBadState(t *testing.T) {
	ds := mustSampler(t, 100, 4, 0) // 25 per rank
	for _, st := range []SamplerState{
		{Epoch: -1},
		{Seen: -1},
		{Seen: 26},
		{Seen: 26, Replicas: 4},
		{Seen: 51, Replicas: 2},
		{Replicas: -2},
	} {
		if err := ds.Restore(st); !errors.Is(err, ErrInvalidState) {
			t.Errorf("Restore(%+v) = %v, want ErrInvalidState", st, err)
		}
	}
	if err := NewSequentialSampler(3).Restore(SamplerState{Seen: 4}); !errors.Is(err, ErrInvalidState) {
		t.Errorf("sequential Restore past the end = %v", err)
	}
}

// TestRestoreOtherWorldSize resumes an epoch begun on 4 ranks on 3 (and 2
// on 5): no index unseen before the restart may be skipped, and all new
// ranks skip alike.
func TestRestoreOtherWorldSize(t *testing.T) {
	for _, c := range []struct{ n, from, to, seen int }{
		{1000, 4, 3, 100}, {1000, 2, 5, 333}, {7, 3, 2, 2}, {60000, 8, 3, 7000},
	} {
		seenBefore := map[int]bool{}
		for rank := range c.from {
			s := mustSampler(t, c.n, c.from, rank, Seed(1))
			s.SetEpoch(3)
			for _, i := range s.AppendIndices(nil)[:c.seen] {
				seenBefore[i] = true
			}
		}
		st := SamplerState{Epoch: 3, Seen: c.seen, Replicas: c.from}
		union := map[int]bool{}
		skips := -1
		for rank := range c.to {
			s := mustSampler(t, c.n, c.to, rank, Seed(1))
			if err := s.Restore(st); err != nil {
				t.Fatal(err)
			}
			s.SetEpoch(3)
			rest := s.AppendIndices(nil)
			if skips >= 0 && s.Len()-len(rest) != skips {
				t.Fatalf("%+v: ranks skip different counts", c)
			}
			skips = s.Len() - len(rest)
			for _, i := range rest {
				union[i] = true
			}
		}
		for i := range c.n {
			if !seenBefore[i] && !union[i] {
				t.Fatalf("%+v: index %d was never seen and is skipped after the restore", c, i)
			}
		}
		if skips == 0 && c.seen > 0 {
			t.Fatalf("%+v: nothing skipped", c)
		}
	}
}
