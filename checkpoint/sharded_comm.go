package checkpoint

import (
	"context"
	"fmt"
	"unsafe"
)

// The collectives a sharded save and load need, built on Group's
// Broadcast and AllGather of int64 words.

// wordsOf returns n bytes viewed in a fresh buffer of int64 words.
func wordsOf(n int) ([]int64, []byte) {
	words := make([]int64, (n+7)/8)
	if len(words) == 0 {
		return words, nil
	}
	return words, unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), 8*len(words))[:n]
}

// gatherBytes gives every rank every rank's data, by rank.
func gatherBytes(ctx context.Context, g Group, data []byte) ([][]byte, error) {
	size := g.Size()
	lens := make([]int64, size)
	if err := g.AllGather(ctx, lens, []int64{int64(len(data))}); err != nil {
		return nil, err
	}
	var maxWords int64
	for r, n := range lens {
		if n < 0 || n > 1<<40 {
			return nil, fmt.Errorf("rank %d sent a length of %d bytes", r, n)
		}
		maxWords = max(maxWords, (n+7)/8)
	}
	out := make([][]byte, size)
	if maxWords == 0 {
		return out, nil
	}
	mine := make([]int64, maxWords)
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&mine[0])), 8*maxWords), data)
	all := make([]int64, int64(size)*maxWords)
	if err := g.AllGather(ctx, all, mine); err != nil {
		return nil, err
	}
	allBytes := unsafe.Slice((*byte)(unsafe.Pointer(&all[0])), 8*len(all))
	for r := range size {
		start := int64(r) * maxWords * 8
		out[r] = allBytes[start : start+lens[r] : start+lens[r]]
	}
	return out, nil
}

// broadcastFrom sends root's data to every rank, with its length first.
func broadcastFrom(ctx context.Context, g Group, root int, data []byte) ([]byte, error) {
	head := []int64{int64(len(data))}
	if err := g.Broadcast(ctx, head, root); err != nil {
		return nil, err
	}
	if head[0] < 0 || head[0] > 1<<40 {
		return nil, fmt.Errorf("rank %d sent a length of %d bytes", root, head[0])
	}
	words, buf := wordsOf(int(head[0]))
	if len(words) == 0 {
		return nil, nil
	}
	if g.Rank() == root {
		copy(buf, data)
	}
	if err := g.Broadcast(ctx, words, root); err != nil {
		return nil, err
	}
	return buf, nil
}

// agreeError returns the same error on every rank: nil if no rank's err
// is set, otherwise the lowest failing rank's message, with the other
// failing ranks counted.
func agreeError(ctx context.Context, g Group, err error) error {
	var msg []byte
	if err != nil {
		msg = []byte(err.Error())
		if len(msg) == 0 {
			msg = []byte("error without a message")
		}
	}
	all, gerr := gatherBytes(ctx, g, msg)
	if gerr != nil {
		if err != nil {
			return err
		}
		return fmt.Errorf("checkpoint: agreeing on the outcome: %w", gerr)
	}
	var failed []int
	for r, m := range all {
		if len(m) > 0 {
			failed = append(failed, r)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	first := string(all[failed[0]])
	if len(failed) > 1 {
		return fmt.Errorf("%s (rank %d; ranks %v failed)", first, failed[0], failed)
	}
	if g.Rank() == failed[0] && err != nil {
		return fmt.Errorf("%w (rank %d)", err, failed[0])
	}
	return fmt.Errorf("%s (rank %d)", first, failed[0])
}
