package fsdp

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"

	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/internal/kernels"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/tensor"
)

// ClipGradNorm scales the shards' gradients so that the norm of the whole
// model's gradient is at most maxNorm, and returns the norm before
// clipping, as optim.ClipGradNorm does on a replicated model: the sum of
// squares of every rank's shard is allreduced, so every rank gets the
// same norm and clips alike. Call it after Backward and before the
// optimizer steps, on every rank. It fails on a negative or NaN maxNorm.
func (m *Model) ClipGradNorm(maxNorm float64) (float64, error) {
	if !(maxNorm >= 0) {
		return 0, fmt.Errorf("fsdp: ClipGradNorm: invalid max norm %v", maxNorm)
	}
	var sq float64
	for _, p := range m.params {
		if g := p.shard.Grad(); g != nil {
			sq += sumSquares(g.Data())
		}
	}
	if m.cfg.strategy != NoShard && m.ns > 1 {
		// Replicas across nodes hold equal shards: the shard group's sum
		// covers the model once.
		buf := []float64{sq}
		if err := m.shardG.AllReduce(m.ctx, buf, distributed.Sum); err != nil {
			return 0, fmt.Errorf("fsdp: ClipGradNorm: summing the shards' squares: %w", err)
		}
		sq = buf[0]
	}
	norm := math.Sqrt(sq)
	coef := maxNorm / (norm + 1e-6)
	if coef < 1 || math.IsNaN(coef) {
		for _, p := range m.params {
			if g := p.shard.Grad(); g != nil {
				kernels.Scale(float32(coef), g.Data())
			}
		}
	}
	return norm, nil
}

// sumSquares is Σx² in float64 blocks of float32 dot products, as optim's.
func sumSquares(x []float32) float64 {
	var total float64
	for lo := 0; lo < len(x); lo += 256 {
		b := x[lo:min(lo+256, len(x))]
		total += float64(kernels.Dot(b, b))
	}
	return total
}

// FullStateDict gathers the full parameters and returns the module's
// state dict (nn.StateDict's names, tied weights under each of their
// names, buffers included) as copies: for saving a consolidated
// checkpoint. Every rank of the shard group must call it. Units are
// gathered one at a time, so that beside the copies a rank holds one
// unit's full parameters at most.
func (m *Model) FullStateDict(ctx context.Context) ([]nn.Named, error) {
	return m.fullStateDict(ctx, true)
}

// FullStateDictOn is FullStateDict for the rank dst of the group New was
// given alone: every rank takes part in the gathers, and the others keep
// nothing of them (their result is nil), so that consolidating a model
// too large for one rank's memory costs the others one unit's.
func (m *Model) FullStateDictOn(ctx context.Context, dst int) ([]nn.Named, error) {
	if dst < 0 || dst >= m.world.Size() {
		return nil, fmt.Errorf("fsdp: FullStateDictOn: rank %d outside the group of %d", dst, m.world.Size())
	}
	return m.fullStateDict(ctx, m.world.Rank() == dst)
}

func (m *Model) fullStateDict(ctx context.Context, keep bool) ([]nn.Named, error) {
	// The communication buffers kept for training are collected first,
	// so that the copies take their memory rather than more.
	m.bufs.drop()
	runtime.GC()
	copies := map[*tensor.Tensor]*tensor.Tensor{}
	if m.cfg.strategy != NoShard {
		for ui, u := range m.units {
			if len(u.params) == 0 {
				continue
			}
			if err := m.finishGather(ctx, ui, false); err != nil {
				if m.releases() {
					m.release()
				}
				return nil, err
			}
			if keep {
				for _, i := range u.params {
					copies[m.params[i].t] = m.params[i].t.Clone()
				}
			}
			if m.releases() {
				m.releaseUnit(ui)
			}
		}
	}
	if !keep {
		return nil, nil
	}
	sd := nn.StateDict(m.module)
	for i, e := range sd {
		if c, ok := copies[e.Tensor]; ok {
			sd[i].Tensor = c
		} else {
			sd[i].Tensor = e.Tensor.Clone()
		}
	}
	return sd, nil
}

// LoadFullStateDict loads a full state dict (nn.LoadStateDict's rules,
// strict or not) into the module and re-cuts every rank's shards from it.
// Every rank loads the same state; it runs no collective.
func (m *Model) LoadFullStateDict(sd map[string]*tensor.Tensor, strict bool) error {
	for _, p := range m.params {
		if p.t.Len() != p.numel {
			p.t.SetData(make([]float32, p.numel))
		}
	}
	err := nn.LoadStateDict(m.module, sd, strict)
	if err == nil {
		for _, p := range m.params {
			m.copyToShard(p)
		}
	}
	if m.releases() {
		m.release()
	}
	if err != nil {
		return fmt.Errorf("fsdp: %w", err)
	}
	return nil
}

// Piece is a slice of one tensor of a sharded checkpoint: the elements
// [Offset, Offset+len(Data)) of the flattened tensor Key of shape
// GlobalShape.
type Piece struct {
	Key         string
	GlobalShape []int
	Offset      int
	Data        []float32
}

// writesPieces reports whether this rank contributes parameter pieces to
// a sharded checkpoint: one copy of each shard, from the first node under
// HybridShard.
func (m *Model) writesPieces() bool { return m.replG == nil || m.replG.Rank() == 0 }

// ShardedStateDict returns this rank's pieces of the model: the real
// elements of each parameter's shard (copies), and, on rank 0, each
// buffer whole. The pieces of all ranks cover every tensor once.
func (m *Model) ShardedStateDict() []Piece {
	var out []Piece
	if m.writesPieces() && (m.cfg.strategy != NoShard || m.world.Rank() == 0) {
		for _, p := range m.params {
			off, n := m.span(p)
			if n == 0 {
				continue
			}
			out = append(out, Piece{Key: p.name, GlobalShape: slices.Clone(p.shape), Offset: off, Data: slices.Clone(p.shard.Data()[:n])})
		}
	}
	if m.world.Rank() == 0 {
		for _, b := range nn.NamedBuffers(m.module) {
			out = append(out, Piece{Key: b.Name, GlobalShape: slices.Clone(b.Tensor.Shape()), Data: slices.Clone(b.Tensor.Data())})
		}
	}
	return out
}

// LoadShardedStateDict fills this rank's shards (and the buffers) from
// pieces, which may come from any number of ranks of a run with any world
// size: each rank takes the part of each piece that overlaps its shard.
// It fails naming the tensor when a piece's shape differs from the
// model's or a shard's elements are not all covered; the model is then
// unchanged.
func (m *Model) LoadShardedStateDict(pieces []Piece) error {
	byKey := map[string][]Piece{}
	for _, pc := range pieces {
		byKey[pc.Key] = append(byKey[pc.Key], pc)
	}
	type fill struct{ dst []float32 }
	var fills []fill
	place := func(key string, shape []int, lo, n int) ([]float32, error) {
		dst := make([]float32, n)
		covered := make([]bool, n)
		for _, pc := range byKey[key] {
			if !slices.Equal(pc.GlobalShape, shape) {
				return nil, fmt.Errorf("fsdp: loading %s: the checkpoint's shape %v differs from the model's %v", key, pc.GlobalShape, shape)
			}
			a, b := max(lo, pc.Offset), min(lo+n, pc.Offset+len(pc.Data))
			for k := a; k < b; k++ {
				dst[k-lo] = pc.Data[k-pc.Offset]
				covered[k-lo] = true
			}
		}
		if i := slices.Index(covered, false); i >= 0 {
			return nil, fmt.Errorf("fsdp: loading %s: element %d (of shape %v) is in no piece of the checkpoint", key, lo+i, shape)
		}
		return dst, nil
	}
	for _, p := range m.params {
		off, n := m.span(p)
		if m.cfg.strategy == NoShard {
			off, n = 0, p.numel
		}
		d, err := place(p.name, p.shape, off, n)
		if err != nil {
			return err
		}
		fills = append(fills, fill{dst: d})
	}
	bufs := nn.NamedBuffers(m.module)
	for _, b := range bufs {
		d, err := place(b.Name, b.Tensor.Shape(), 0, b.Tensor.Len())
		if err != nil {
			return err
		}
		fills = append(fills, fill{dst: d})
	}
	for i, p := range m.params {
		copy(p.shard.Data(), fills[i].dst)
	}
	for i, b := range bufs {
		copy(b.Tensor.Data(), fills[len(m.params)+i].dst)
	}
	return nil
}
