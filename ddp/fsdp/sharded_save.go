package fsdp

import (
	"context"
	"fmt"
	"runtime"

	"github.com/gotrain/gotrain/tensor"
)

// FullParamsOn gathers the full parameters unit by unit, as
// FullStateDictOn does, and on rank dst of the group New was given calls
// visit with each parameter, by its state-dict name, while its unit is
// gathered: the module's own tensor, holding the full values for the
// duration of the call only. The other ranks take part in the gathers
// and visit nothing. Beside its shards a rank holds one unit's full
// parameters at most and makes no copy of them, so that a model too
// large for one rank's memory can be written out by streaming (see
// checkpoint.ModelWriter). Every rank must call it. A visit's error ends
// the visits, not the gathers, which every rank completes; dst returns
// it.
func (m *Model) FullParamsOn(ctx context.Context, dst int, visit func(name string, t *tensor.Tensor) error) error {
	if dst < 0 || dst >= m.world.Size() {
		return fmt.Errorf("fsdp: FullParamsOn: rank %d outside the group of %d", dst, m.world.Size())
	}
	keep := m.world.Rank() == dst
	// The communication buffers kept for training go first, so that a
	// unit's gather takes their memory rather than more.
	m.bufs.drop()
	runtime.GC()
	var visitErr error
	for ui, u := range m.units {
		if len(u.params) == 0 {
			continue
		}
		if m.cfg.strategy != NoShard {
			if err := m.finishGather(ctx, ui, false); err != nil {
				if m.releases() {
					m.release()
				}
				return err
			}
		}
		for _, i := range u.params {
			if !keep || visitErr != nil {
				break
			}
			visitErr = visit(m.params[i].name, m.params[i].t)
		}
		if m.releases() {
			m.releaseUnit(ui)
		}
	}
	return visitErr
}
