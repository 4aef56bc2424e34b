package main

import (
	"context"
	"fmt"
	"os"
	"slices"

	"github.com/spf13/pflag"

	"github.com/gotrain/gotrain/internal/sshcmd"
	"github.com/gotrain/gotrain/launch"
	"github.com/gotrain/gotrain/launch/fanout"
)

// trainGPTOnHosts is `gotrain train gpt --hosts`: the job's workers, this
// gotrain re-run on every host, print rank 0's sample and summary, the
// summary last.
func trainGPTOnHosts(ctx context.Context, f *pflag.FlagSet, fl trainGPTFlags) error {
	h := fl.hosts
	hs, err := h.check(f)
	if err != nil {
		return err
	}
	n, err := h.nproc(f, fl.nproc)
	if err != nil {
		return err
	}
	for _, check := range []func() error{
		fl.output.checkFormat,
		func() error { return fl.timeout.check(f) },
		func() error { return checkAtLeast("max-restarts", fl.launch.MaxRestarts, 0) },
		fl.checkModel,
		fl.checkTraining,
		func() error { return fl.checkFiles(f) },
		// The launcher serves the endpoints even for one worker.
		func() error { return fl.observe.check(f, true, 2, fl.job.Progress) },
	} {
		if err := check(); err != nil {
			return err
		}
	}
	if h.masterPort <= 0 || h.masterPort > 65535 {
		return badFlag("master-port", h.masterPort, "must be in [1, 65535]")
	}
	if fl.launch.LogDir != "" {
		if err := checkWritableDir("log-dir", fl.launch.LogDir); err != nil {
			return err
		}
	}
	// The output flags name local ranks that every host must have.
	probe := launch.Config{NProcPerNode: slices.Min(fanout.Config{Hosts: hs, NProcPerNode: n}.Workers()), LogDir: fl.launch.LogDir}
	if err := fl.output.apply(f, &probe); err != nil {
		return err
	}
	every, err := logEvery(fl.logEvery)
	if err != nil {
		return err
	}
	program := h.remoteGotrain
	if program == "" {
		if program, err = os.Executable(); err != nil {
			return fmt.Errorf("finding the gotrain binary to start workers: %w", err)
		}
	}
	cfg := fanout.Config{
		Hosts: hs, SSH: sshcmd.Client{Options: h.sshOptions}, Gotrain: h.remoteGotrain,
		Program: program, Args: os.Args[1:], NProcPerNode: n, MasterPort: h.masterPort,
		MaxRestarts: fl.launch.MaxRestarts, ExitWait: h.exitWait, LogDir: fl.launch.LogDir,
		Redirects: probe.Redirects, Tee: probe.Tee, LocalRanksFilter: probe.LocalRanksFilter,
	}
	fl.timeout.export()
	sum := &summaryCatcher{}
	err = launchOnHosts(ctx, cfg, h, fl.output, &fl.observe, every, false, sum.wrap, trainWorkerEnv+"=1")
	if err == nil && sum.line != "" {
		fmt.Println(sum.line)
	}
	return err
}
