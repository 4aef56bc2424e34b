package gptjob

import (
	"fmt"

	"github.com/gotrain/gotrain/ddp"
	"github.com/gotrain/gotrain/jobs/jobflag"
)

// commHook is the DDP option installing the reduction Config.CommHook
// names. For "powersgd" in a group it keeps the hook in j.psgd, for
// checkpoints.
func (j *job) commHook() (ddp.Option, error) {
	opt, h, err := jobflag.CommHook(j.cfg.CommHook, j.cfg.PowerSGD, j.run.World())
	if err != nil {
		return nil, fmt.Errorf("gptjob: %w", err)
	}
	j.psgd = h
	return opt, nil
}
