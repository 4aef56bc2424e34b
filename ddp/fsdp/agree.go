package fsdp

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/gotrain/gotrain/distributed"
)

// plan is what every rank must agree on: the strategy, the units and
// every parameter's name, unit and shape.
type plan struct {
	strategy ShardingStrategy
	units    []string
	nodes    string // HybridShard's node layout
	params   []planParam
}

type planParam struct {
	name  string
	unit  int
	shape []int
}

func (m *Model) describe() plan {
	pl := plan{strategy: m.cfg.strategy}
	if m.cfg.strategy == HybridShard {
		pl.nodes = fmt.Sprint(m.cfg.nodes)
	}
	for _, u := range m.units {
		pl.units = append(pl.units, u.name)
	}
	for _, p := range m.params {
		pl.params = append(pl.params, planParam{name: p.name, unit: p.unit, shape: p.shape})
	}
	return pl
}

// maxDims is the number of dimensions a record holds; higher ones fold
// into the last.
const maxDims = 6

// recordLen is the int64s of one parameter's record: name hash, unit,
// ndim and maxDims dimensions.
const recordLen = 3 + maxDims

func hashName(s string) int64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return int64(h.Sum64() >> 1)
}

// encode lays the plan out as int64s: a header (strategy, unit count,
// parameter count, hashes of the unit names and of the node layout) and
// one record per parameter.
func (pl plan) encode() []int64 {
	out := []int64{int64(pl.strategy), int64(len(pl.units)), int64(len(pl.params)), hashName(strings.Join(pl.units, "\x00")), hashName(pl.nodes)}
	for _, p := range pl.params {
		r := make([]int64, recordLen)
		r[0] = hashName(p.name)
		r[1] = int64(p.unit)
		r[2] = int64(len(p.shape))
		for i, d := range p.shape {
			if i < maxDims {
				r[3+i] = int64(d)
			} else {
				r[3+maxDims-1] *= int64(d)
			}
		}
		out = append(out, r...)
	}
	return out
}

const headerLen = 5

// verifyAgreement exchanges the plans of all ranks and fails, on every
// rank with the same message, when any differs from rank 0's.
func verifyAgreement(ctx context.Context, g *distributed.Group, pl plan) error {
	n := g.Size()
	if n == 1 {
		return nil
	}
	mine := pl.encode()
	lens := make([]int64, n)
	if err := g.AllGather(ctx, lens, []int64{int64(len(mine))}); err != nil {
		return fmt.Errorf("fsdp: exchanging the sharding plans: %w", err)
	}
	width := int64(0)
	for _, l := range lens {
		width = max(width, l)
	}
	buf := make([]int64, width)
	copy(buf, mine)
	all := make([]int64, int64(n)*width)
	if err := g.AllGather(ctx, all, buf); err != nil {
		return fmt.Errorf("fsdp: exchanging the sharding plans: %w", err)
	}
	rec := func(r int) []int64 { return all[int64(r)*width : int64(r)*width+lens[r]] }
	ref := rec(0)
	for r := 1; r < n; r++ {
		if d := diff(ref, rec(r), pl, r); d != "" {
			return fmt.Errorf("fsdp: ranks disagree on the sharded model (this is rank %d): %s", g.Rank(), d)
		}
	}
	return nil
}

// diff describes the first difference between rank 0's encoded plan a
// and rank r's b, or returns "". pl (this rank's plan) names parameters.
func diff(a, b []int64, pl plan, r int) string {
	if a[0] != b[0] {
		return fmt.Sprintf("rank 0 uses strategy %s, rank %d uses %s", ShardingStrategy(a[0]), r, ShardingStrategy(b[0]))
	}
	if a[1] != b[1] || a[3] != b[3] {
		return fmt.Sprintf("rank 0 has %d units, rank %d has %d (or they are different submodules)", a[1], r, b[1])
	}
	if a[4] != b[4] {
		return fmt.Sprintf("rank 0 and rank %d give different hybrid node layouts (this rank's: %s)", r, pl.nodes)
	}
	if a[2] != b[2] {
		return fmt.Sprintf("rank 0 has %d parameters, rank %d has %d", a[2], r, b[2])
	}
	for i := int64(0); i < a[2]; i++ {
		ra := a[headerLen+i*recordLen : headerLen+(i+1)*recordLen]
		rb := b[headerLen+i*recordLen : headerLen+(i+1)*recordLen]
		for k := range ra {
			if ra[k] == rb[k] {
				continue
			}
			name := fmt.Sprintf("parameter %d", i)
			if int(i) < len(pl.params) {
				name = fmt.Sprintf("parameter %d %q", i, pl.params[i].name)
			}
			what := "name"
			if k == 1 {
				what = "unit"
			} else if k >= 2 {
				what = "shape"
			}
			return fmt.Sprintf("%s differs in %s: rank 0: unit %d shape %s; rank %d: unit %d shape %s",
				name, what, ra[1], shapeString(ra), r, rb[1], shapeString(rb))
		}
	}
	return ""
}

func shapeString(rec []int64) string {
	n := min(int(rec[2]), maxDims)
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprint(rec[3+i])
	}
	return "[" + strings.Join(parts, " ") + "]"
}
