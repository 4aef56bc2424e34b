package ddp

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/gotrain/gotrain/tensor"
)

// recordLen is the number of int64s describing one parameter in the shape
// check: a hash of its name, its rank (ndim) and up to 4 dimensions (higher
// dimensions are folded into the last).
const recordLen = 6

func describe(name string, shape []int) [recordLen]int64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	var r [recordLen]int64
	r[0] = int64(h.Sum64() >> 1)
	r[1] = int64(len(shape))
	for i, d := range shape {
		if i < recordLen-2 {
			r[2+i] = int64(d)
		} else {
			r[recordLen-1] *= int64(d)
		}
	}
	return r
}

func shapeOf(r []int64) string {
	n := int(r[1])
	if n > recordLen-2 {
		n = recordLen - 2
	}
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprint(r[2+i])
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// verifyShapes checks that all ranks hold the same parameters, in the same
// order, with the same shapes: replicas that differ would average unrelated
// numbers silently.
func verifyShapes(ctx context.Context, g Group, names []string, params []*tensor.Tensor) error {
	n := g.Size()
	counts := make([]int64, n)
	if err := g.AllGather(ctx, counts, []int64{int64(len(params))}); err != nil {
		return fmt.Errorf("ddp: exchanging parameter counts: %w", err)
	}
	maxCount := int64(0)
	for _, c := range counts {
		maxCount = max(maxCount, c)
	}
	mine := make([]int64, int(maxCount)*recordLen)
	for i, p := range params {
		r := describe(names[i], p.Shape())
		copy(mine[i*recordLen:], r[:])
	}
	all := make([]int64, n*len(mine))
	if err := g.AllGather(ctx, all, mine); err != nil {
		return fmt.Errorf("ddp: exchanging parameter shapes: %w", err)
	}
	for i := 0; i < int(maxCount); i++ {
		differ := false
		first := all[i*recordLen : (i+1)*recordLen]
		for r := 1; r < n; r++ {
			rec := all[(r*int(maxCount)+i)*recordLen : (r*int(maxCount)+i+1)*recordLen]
			for k := range rec {
				if rec[k] != first[k] {
					differ = true
				}
			}
		}
		if !differ {
			continue
		}
		name := "(missing on this rank)"
		if i < len(names) {
			name = names[i]
		}
		var each []string
		for r := 0; r < n; r++ {
			if int64(i) >= counts[r] {
				each = append(each, fmt.Sprintf("rank %d: none (it has %d parameters)", r, counts[r]))
				continue
			}
			rec := all[(r*int(maxCount)+i)*recordLen : (r*int(maxCount)+i+1)*recordLen]
			nameNote := ""
			if rec[0] != first[0] {
				nameNote = " (different name)"
			}
			each = append(each, fmt.Sprintf("rank %d: %s%s", r, shapeOf(rec), nameNote))
		}
		return fmt.Errorf("ddp: parameter %d %q differs across ranks (this is rank %d): %s",
			i, name, g.Rank(), strings.Join(each, "; "))
	}
	return nil
}

// broadcastTensors copies rank root's values of ts to every rank in one
// collective.
func broadcastTensors(ctx context.Context, g Group, ts []*tensor.Tensor, root int) error {
	total := 0
	for _, t := range ts {
		total += t.Len()
	}
	flat := make([]float32, 0, total)
	for _, t := range ts {
		flat = append(flat, t.Data()...)
	}
	if err := g.Broadcast(ctx, flat, root); err != nil {
		return err
	}
	off := 0
	for _, t := range ts {
		off += copy(t.Data(), flat[off:off+t.Len()])
	}
	return nil
}
