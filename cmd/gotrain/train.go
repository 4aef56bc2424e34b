package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gotrain/gotrain/distributed/clusterenv"
	"github.com/gotrain/gotrain/event"
	"github.com/gotrain/gotrain/harness"
	"github.com/gotrain/gotrain/internal/kernels"
	"github.com/gotrain/gotrain/internal/logging"
	"github.com/gotrain/gotrain/jobs/gptjob"
	"github.com/gotrain/gotrain/jobs/imagejob"
	"github.com/gotrain/gotrain/jobs/jobflag"
	"github.com/gotrain/gotrain/jobs/mnistjob"
	"github.com/gotrain/gotrain/launch"
	"github.com/gotrain/gotrain/launch/fanout"
	"github.com/gotrain/gotrain/launch/ssh"
	"github.com/gotrain/gotrain/tensor"
)

// trainJobs are the jobs `gotrain train` runs. Adding one is a package
// under jobs/ whose Config has jobConfig's methods, and a line here.
var trainJobs = []trainJob{
	newTrainJob("mnist", mnistjob.Run),
	newTrainJob("gpt", gptjob.Run),
	newTrainJob("images", imagejob.Run),
}

// jobConfig is what `gotrain train` needs of a job's Config: its help,
// its own flags, and the harness settings every job shares, which the
// command fills from the flags common to all jobs.
type jobConfig interface {
	// Usage returns the command's one-line and longer help.
	Usage() (short, long string)
	// RegisterFlags defines the job's own flags, with their defaults.
	RegisterFlags(f *pflag.FlagSet)
	// CheckFlags refuses a value the job would not run with, naming the
	// flag (a *jobflag.Error).
	CheckFlags(f *pflag.FlagSet) error
	// Harness returns the Config's harness settings.
	Harness() *harness.Config
	// MemoryEstimate is the memory one worker needs at its peak, and
	// the size flag that weighs most in it.
	MemoryEstimate() jobflag.Memory
}

// jobArgs is a jobConfig that takes arguments besides its flags, such
// as the image folder of `gotrain train images DIR`.
type jobArgs interface {
	// ArgsUsage names the arguments in the usage line, as "DIR".
	ArgsUsage() string
	// SetArgs takes the arguments, or says why it refuses them.
	SetArgs(args []string) error
}

// trainJob is a job of `gotrain train`: its name, and how to make a
// Config and run the job on it.
type trainJob struct {
	name string
	new  func() (jobConfig, func(context.Context) error)
}

// newTrainJob is the job name whose Run is run.
func newTrainJob[C any, PC interface {
	*C
	jobConfig
}, R any](name string, run func(context.Context, C) (R, error)) trainJob {
	return trainJob{name, func() (jobConfig, func(context.Context) error) {
		cfg := PC(new(C))
		return cfg, func(ctx context.Context) error {
			_, err := run(ctx, *cfg)
			return err
		}
	}}
}

// trainWorkerEnv marks a process started by `gotrain train` as one of its
// workers (whose summary the launching process prints, see
// event.EnvSummary).
const trainWorkerEnv = "GOTRAIN_TRAIN_WORKER"

// newTrainCmd is `gotrain train JOB`, a command per job.
func newTrainCmd() *cobra.Command {
	var names []string
	for _, j := range trainJobs {
		names = append(names, j.name)
	}
	cmd := &cobra.Command{
		Use:   "train JOB",
		Short: "Train a built-in job (" + strings.Join(names, ", ") + ")",
		Args:  cobra.ArbitraryArgs,
		RunE:  unknownSubcommand,
	}
	for _, j := range trainJobs {
		cmd.AddCommand(j.command())
	}
	return cmd
}

// trainFlags are the flags of `gotrain train JOB`: the job's Config (its
// own flags and the harness settings) and, for more than one worker, the
// launcher's.
type trainFlags struct {
	job      jobConfig
	run      func(context.Context) error
	nproc    string
	logEvery string
	launch   launch.Config // MaxRestarts and LogDir
	output   outputFlags
	timeout  timeoutFlag
	tls      tlsFlags
	hosts    hostFlags
	observe  observeFlags
	force    forceFlag
	backoff  backoffFlag
}

// launchHelp is the end of every job's long help.
const launchHelp = `With --nproc-per-node N > 1 it starts N workers like 'gotrain run' and
trains them with DistributedDataParallel; with --hosts (or --hostfile) it
starts them on those machines over ssh, as 'gotrain run --hosts'.
--save and --resume make a job that carries on where it stopped, also after
--max-restarts restarts its workers.`

// command is `gotrain train NAME`.
func (j trainJob) command() *cobra.Command {
	fl := &trainFlags{}
	fl.job, fl.run = j.new()
	short, long := fl.job.Usage()
	use, args := j.name, cobra.PositionalArgs(noArgs)
	if a, ok := fl.job.(jobArgs); ok {
		use += " " + a.ArgsUsage()
		args = func(cmd *cobra.Command, as []string) error {
			if err := a.SetArgs(as); err != nil {
				return usagef("%s: %v", cmd.CommandPath(), err)
			}
			return nil
		}
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short + ", on one or several workers and machines",
		Long:  long + "\n\n" + launchHelp,
		Args:  args,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := cmd.Flags()
			if fl.hosts.applies(f) {
				if os.Getenv(trainWorkerEnv) == "" {
					return fl.onHosts(cmd.Context(), f)
				}
				return fl.train(cmd.Context(), 1) // one worker; the launcher checked the flags
			}
			n, err := fl.check(f)
			if err != nil {
				return err
			}
			return fl.train(cmd.Context(), n)
		},
	}
	fl.register(cmd.Flags())
	return cmd
}

// register defines the flags on f: the launcher's, the job's own, and
// the harness settings every job shares.
func (fl *trainFlags) register(f *pflag.FlagSet) {
	h := fl.job.Harness()
	f.StringVar(&fl.nproc, "nproc-per-node", "1", "number of local workers: an integer; cpu for one per CPU; auto for the layout measured faster for the job: one worker of one thread per CPU, each on its own batch, for the MNIST CNN and the GPT (on 2 AMD Zen 4 CPUs 2 workers trained them 1.06× and 1.03× as fast as one process of 2 threads), one worker per 2 CPUs for the MNIST MLP (one process of 2 threads trained it 1.07× as fast as 2 workers), or fewer workers of more threads each where memory holds fewer")
	f.IntVar(&fl.launch.MaxRestarts, "max-restarts", 0, "with --nproc-per-node > 1: restart all workers up to N times when one fails (use with --save and --resume)")
	fl.backoff.register(f)
	f.StringVar(&fl.launch.LogDir, "log-dir", "", "with --nproc-per-node > 1: also write each worker's output under this directory (see --tee and --redirects)")
	fl.output.register(f)
	fl.timeout.register(f)
	fl.tls.register(f)
	fl.job.RegisterFlags(f)
	f.StringVar(&h.Precision, "precision", harness.FP32, "matmuls and convolutions in fp32, bf16 (mixed precision on a bf16 GEMM kernel: needs AMX_BF16, or AVX512_BF16 on AMD Zen 4 or later) or bf16-emulated (the same numerics in software, slower than fp32)")
	registerDataParallel(f, h)
	registerFT(f, h)
	f.StringVar(&h.Save, "save", "", "save the model here (safetensors, loadable by PyTorch) at the end of every epoch and of the run, with a training checkpoint beside it")
	f.BoolVar(&h.Resume, "resume", false, "continue from the training checkpoint beside --save if there is one")
	f.IntVar(&h.SaveEvery, "save-every", 0, "also checkpoint every N steps")
	f.BoolVar(&h.Profile, "profile", false, "print the mean time per step in data, forward, backward, exposed allreduce wait and optimizer")
	f.BoolVar(&h.Progress, "progress", true, "show a progress bar per epoch or evaluation interval (plain lines when stderr is not a terminal)")
	f.StringVar(&h.OnNaN, "on-nan", harness.OnNaNStop, "when a step's loss or gradient norm is NaN or infinite: stop (end the job with an error), skip (drop the step's update on every rank and train on) or warn (train on); the first is logged and the summary counts them")
	addLogEvery(f, &fl.logEvery)
	fl.hosts.registerTrain(f)
	fl.observe.registerJob(f)
	fl.force.register(f)
}

// train runs the job in this process, or starts the n workers that do;
// the flags have passed check.
func (fl *trainFlags) train(ctx context.Context, n int) error {
	h := fl.job.Harness()
	h.Metrics, h.Trace, h.MetricsEvery = fl.observe.jobConfig()
	fl.timeout.export()
	fl.tls.export()
	every, err := logEvery(fl.logEvery) // checked by check
	if err != nil {
		return err
	}
	// One worker trains in this process, unless the launcher is to serve
	// its dashboard or metrics: it then runs as the launcher's worker.
	if (n > 1 || fl.observe.served()) && os.Getenv(trainWorkerEnv) == "" {
		fl.launch.NProcPerNode = n
		fl.backoff.apply(&fl.launch)
		fl.launch.FT, fl.launch.MinReplicas = h.FT, h.MinReplicas
		return launchTrainWorkers(ctx, fl.launch, fl.output, every, fl.observe)
	}
	if fl.output.logFormat != "" {
		// The job, and the library under it, log as --log-format says.
		_ = os.Setenv(logging.EnvFormat, fl.output.logFormat) // a valid name and value: cannot fail
		slog.SetDefault(logging.FromEnv(os.Stderr, ""))
	}
	// Rank 0 prints the summary last, or, as one of this command's
	// workers, sends it to the launching process (event.EnvSummary).
	h.LogEvery, h.Summary = every, os.Stdout
	err = fl.run(ctx)
	if nf := (*harness.NonFiniteError)(nil); errors.As(err, &nf) {
		return fmt.Errorf("%w; lower --lr or use --on-nan skip|warn", err)
	}
	return err
}

// check refuses, as usage errors naming the flag, every value the job or
// the launcher would not run with, and returns the number of workers.
// It runs in the launching process, before any worker starts.
func (fl *trainFlags) check(f *pflag.FlagSet) (int, error) {
	n, err := parseNProcPerNode(fl.nproc)
	if err != nil {
		return 0, badFlag("nproc-per-node", fl.nproc, err.Error())
	}
	if fl.nproc == "auto" && os.Getenv(trainWorkerEnv) == "" {
		// The launching process chooses, from the job's memory estimate
		// (so its flags first); its workers, which see the machine with
		// the others' memory taken, keep its choice.
		if err := fl.checkJob(f); err != nil {
			return 0, err
		}
		l := fl.autoWorkers()
		n = l.workers
		slog.Info("gotrain: --nproc-per-node auto", "workers", l.workers, "threads_per_worker", l.threads, "cpus", clusterenv.CPUs())
	}
	if err := fl.checkLauncher(f, n); err != nil {
		return 0, err
	}
	if err := fl.output.checkFormat(); err != nil {
		return 0, err
	}
	if err := fl.timeout.check(f); err != nil {
		return 0, err
	}
	if err := fl.tls.check(false); err != nil {
		return 0, err
	}
	if err := fl.observe.check(f, true, n, fl.job.Harness().Progress); err != nil {
		return 0, err
	}
	if err := fl.checkJob(f); err != nil {
		return 0, err
	}
	if os.Getenv(trainWorkerEnv) != "" {
		return n, nil // the launching process checked the sizes for all its workers
	}
	return n, checkSizes(fl.sizeCheck(n), fl.force.on)
}

// sizeCheck is what n local workers of this job ask of the machine.
func (fl *trainFlags) sizeCheck(n int) sizeCheck {
	mem := fl.job.MemoryEstimate()
	if w, ok := fl.job.(interface{ MemoryEstimateWorld(int) jobflag.Memory }); ok {
		mem = w.MemoryEstimateWorld(n) // the state a sharded job spreads over its workers
	}
	return sizeCheck{nproc: n, nprocFlag: fl.nproc, world: n, mesh: true, memory: mem}
}

// checkLauncher checks the flags of the launcher, which only n > 1 workers
// use: given with one worker, they would silently do nothing.
func (fl *trainFlags) checkLauncher(f *pflag.FlagSet, n int) error {
	if n == 1 {
		for _, name := range []string{"max-restarts", "restart-backoff", "log-dir", "tee", "redirects", "local-ranks-filter"} {
			if f.Changed(name) {
				return badFlag(name, f.Lookup(name).Value.String(), "applies only with --nproc-per-node > 1 (one worker trains in this process)")
			}
		}
		return nil
	}
	if err := checkAtLeast("max-restarts", fl.launch.MaxRestarts, 0); err != nil {
		return err
	}
	if err := fl.backoff.check(); err != nil {
		return err
	}
	if fl.launch.LogDir != "" {
		if err := checkWritableDir("log-dir", fl.launch.LogDir); err != nil {
			return err
		}
	}
	probe := launch.Config{NProcPerNode: n, LogDir: fl.launch.LogDir}
	return fl.output.apply(f, &probe)
}

// checkJob checks the job's own flags, then the harness settings every
// job shares: the precision and the checkpoint flags.
func (fl *trainFlags) checkJob(f *pflag.FlagSet) error {
	if err := fl.job.CheckFlags(f); err != nil {
		var fe *jobflag.Error
		switch {
		case !errors.As(err, &fe):
			return usagef("%s", err)
		case fe.HasValue:
			return badFlag(fe.Flag, fe.Value, fe.Why)
		}
		return flagNeeds(fe.Flag, fe.Why)
	}
	h := fl.job.Harness()
	if err := checkPrecision(h.Precision); err != nil {
		return err
	}
	if err := checkDataParallel(f, h); err != nil {
		return err
	}
	if err := checkTrainFT(f, h); err != nil {
		return err
	}
	if err := checkOneOf("on-nan", h.OnNaN, harness.OnNaNStop, harness.OnNaNSkip, harness.OnNaNWarn); err != nil {
		return err
	}
	if f.Changed("save-every") && h.SaveEvery < 1 {
		return badFlag("save-every", h.SaveEvery, "must be at least 1 (leave it out to checkpoint at the ends of epochs and of the run only)")
	}
	switch {
	case f.Changed("save"):
		return checkSavePath("save", h.Save)
	case h.Resume:
		return flagNeeds("resume", "needs --save, the checkpoint to resume from")
	case f.Changed("save-every"):
		return badFlag("save-every", h.SaveEvery, "needs --save, where to checkpoint")
	}
	return nil
}

// checkPrecision refuses a --precision value the job cannot run here:
// bf16 needs a native bf16 kernel (it is refused, not silently emulated,
// since emulation is slower than fp32; bf16-emulated asks for it).
func checkPrecision(p string) error {
	if err := checkOneOf("precision", p, harness.FP32, harness.BF16, harness.BF16Emulated); err != nil {
		return err
	}
	if p != harness.BF16 {
		return nil
	}
	if err := tensor.CheckPrecision(tensor.BF16); err != nil {
		return badFlag("precision", p, kernels.BF16Missing()+" (--precision bf16-emulated runs the same numerics in software, slower than fp32)")
	}
	return nil
}

// checkTrainArgs checks the arguments of a `gotrain train name` run as
// that command would, for a command that runs it.
func checkTrainArgs(name string, args []string) error {
	i := slices.IndexFunc(trainJobs, func(j trainJob) bool { return j.name == name })
	if i < 0 {
		return usagef("train: unknown job %q", name)
	}
	fl := &trainFlags{}
	fl.job, fl.run = trainJobs[i].new()
	f := pflag.NewFlagSet("train "+name, pflag.ContinueOnError)
	f.SetOutput(io.Discard)
	fl.register(f)
	if err := f.Parse(args); err != nil {
		return flagErrorFunc(nil, err)
	}
	if a, ok := fl.job.(jobArgs); ok {
		if err := a.SetArgs(f.Args()); err != nil {
			return usagef("train %s: %v", name, err)
		}
	} else if f.NArg() > 0 {
		return usagef("train %s: unexpected argument %q (it takes flags only)", name, f.Arg(0))
	}
	_, err := fl.check(f)
	return err
}

// launchTrainWorkers re-runs this command as cfg.NProcPerNode workers
// under the launcher and prints rank 0's summary last.
func launchTrainWorkers(ctx context.Context, cfg launch.Config, output outputFlags, every time.Duration, obs observeFlags) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the gotrain binary to start workers: %w", err)
	}
	cfg.Program, cfg.Args, cfg.Standalone = self, os.Args[1:], true
	// The console first: the launcher's records then print through it.
	cons := attachConsole(&cfg, every)
	var sum summaryCatcher
	cfg.Events = sum.wrap(cfg.Events)
	output.setupLauncherLog(&cfg)
	cfg.Env = append(cfg.Env, trainWorkerEnv+"=1", event.EnvSummary+"=1")
	o, err := obs.attach(&cfg)
	if err != nil {
		cons.Close()
		return err
	}
	warnBeforeStart(cfg)
	code, err := launch.Run(ctx, cfg)
	o.finish(code, err)
	defer o.close() // after the summary: a lingering dashboard waits here
	cons.Close()
	if err != nil {
		return err
	}
	if code != 0 {
		return exitCodeError(code)
	}
	return sum.print(os.Stdout)
}

// onHosts is `gotrain train JOB --hosts`: the job's workers, this gotrain
// re-run on every host, send rank 0's summary, printed here last.
func (fl *trainFlags) onHosts(ctx context.Context, f *pflag.FlagSet) error {
	h := fl.hosts
	hs, err := h.check(f)
	if err != nil {
		return err
	}
	n, err := h.nproc(f, fl.nproc)
	if err != nil {
		return err
	}
	checks := []func() error{
		fl.output.checkFormat,
		func() error { return fl.timeout.check(f) },
		func() error { return fl.tls.check(true) },
		func() error { return checkAtLeast("max-restarts", fl.launch.MaxRestarts, 0) },
		func() error { return fl.checkJob(f) },
		// The launcher serves the endpoints even for one worker.
		func() error { return fl.observe.check(f, true, 2, fl.job.Harness().Progress) },
	}
	for _, check := range checks {
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
		Hosts: hs, SSH: ssh.Client{Options: h.sshOptions}, Gotrain: h.remoteGotrain,
		Program: program, Args: os.Args[1:], NProcPerNode: n, MasterPort: h.masterPort,
		MaxRestarts: fl.launch.MaxRestarts, ExitWait: h.exitWait, LogDir: fl.launch.LogDir,
		Redirects: probe.Redirects, Tee: probe.Tee, LocalRanksFilter: probe.LocalRanksFilter,
	}
	fl.backoff.applyHosts(&cfg)
	cfg.FT, cfg.MinReplicas = fl.job.Harness().FT, fl.job.Harness().MinReplicas
	fl.timeout.export()
	fl.tls.export()
	var sum summaryCatcher
	cfg.Events = sum.event
	if err := launchOnHosts(ctx, cfg, h, fl.output, &fl.observe, every, false, nil, trainWorkerEnv+"=1", event.EnvSummary+"=1"); err != nil {
		return err
	}
	return sum.print(os.Stdout)
}

// summaryCatcher keeps the summary rank 0 sends as its last event
// (event.KindSummary), for the launching process to print last.
type summaryCatcher struct {
	mu sync.Mutex // guards s
	s  *event.Summary
}

// wrap returns an events function that passes each event to sum, then
// to next.
func (c *summaryCatcher) wrap(next func(rank int, line []byte)) func(rank int, line []byte) {
	return func(rank int, line []byte) {
		c.event(rank, line)
		if next != nil {
			next(rank, line)
		}
	}
}

// event takes one event line of a worker.
func (c *summaryCatcher) event(rank int, line []byte) {
	if rank != 0 || event.KindOf(line) != event.KindSummary {
		return
	}
	var ev struct{ Data *event.Summary }
	if json.Unmarshal(line, &ev) != nil || ev.Data == nil {
		return
	}
	c.mu.Lock()
	c.s = ev.Data
	c.mu.Unlock()
}

// print writes the summary to w: its text, then its line.
func (c *summaryCatcher) print(w io.Writer) error {
	c.mu.Lock()
	s := c.s
	c.mu.Unlock()
	if s == nil {
		return errors.New("rank 0 sent no summary")
	}
	_, err := io.WriteString(w, s.Text+s.Line()+"\n")
	return err
}
