package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"sync"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/data"
	"github.com/gotrain/gotrain/ddp"
	"github.com/gotrain/gotrain/ddp/fsdp"
	"github.com/gotrain/gotrain/ddp/localsgd"
	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/event"
	"github.com/gotrain/gotrain/internal/logging"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/progress"
	"github.com/gotrain/gotrain/tensor"
)

// Run is one training run of this process: its place in the job, the
// process group it joined (none when it trains alone), the model's DDP
// wrapper, its reporting and its checkpoints. Start makes it and Close
// releases it. A Run is for the goroutine that trains.
type Run struct {
	cfg           Config
	log           *slog.Logger
	lines         *lineWriter        // Out, or the progress display's writer above its bar
	pg            *distributed.Group // nil when training alone
	world, rank   int
	dm            *ddp.Model // nil when training alone or before Wrap
	bf16          bool       // Autocast runs in bf16
	emulating     bool       // Start turned bf16 emulation on; prevEmulation is what it was
	prevEmulation bool
	rep           *progress.Reporter // made by reporter; nil without progress or a launcher
	resumed       bool               // Resume has run
	closed        bool
	nan           *guard // Train's watch over non-finite steps, made by its first call
	ft            *ftRun // with Config.FT: the replica's fault tolerance

	fm           *fsdp.Model      // with Config.Sharding in a group, after Wrap
	lm           *localsgd.Model  // with Config.LocalSGD or DiLoCo in a group, made by startLocal
	localModule  nn.Module        // what startLocal wraps
	module       nn.Module        // the model Wrap was given
	params       []*tensor.Tensor // the wrapper's Parameters
	optParams    []*tensor.Tensor // the optimizer's parameters in its order (DecayGroups'), else params
	rss          []int64          // every rank's peak RSS in MiB, gathered by Train under sharding or local SGD
	tokens       int64            // samples (or tokens) this rank trained on in this run
	countsTokens bool             // tokens counts tokens (Loop.Tokens)
}

// Start begins a run: it checks cfg (an error names the field and the
// value given), reads the environment (a malformed RANK, WORLD_SIZE or
// LOCAL_WORLD_SIZE is an error naming it, never a lone run) and joins
// the process group if the job has more than one rank. The caller must
// Close the Run.
func Start(ctx context.Context, cfg Config) (*Run, error) {
	if err := cfg.resolve(); err != nil {
		return nil, err
	}
	r := &Run{cfg: cfg, lines: &lineWriter{w: cfg.Out}, world: 1,
		bf16: cfg.Precision == BF16 || cfg.Precision == BF16Emulated}
	r.log = cfg.Logger
	if r.log == nil {
		r.log = logging.FromEnv(r.lines, "")
	}
	if cfg.Precision == BF16Emulated {
		r.prevEmulation, r.emulating = tensor.SetBF16Emulation(true), true
		r.log.Info("bf16 emulated: matmul operands rounded to bf16 in software, multiplied in float32 (bf16 numerics at below-fp32 speed)")
	}
	if cfg.FT {
		if err := r.startFT(ctx); err != nil {
			r.Close()
			return nil, err
		}
		return r, nil
	}
	if cfg.InitMethod != "" {
		pg, err := distributed.Init(ctx, distributed.Config{InitMethod: cfg.InitMethod, Rank: cfg.Rank, WorldSize: cfg.WorldSize})
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("harness: joining the process group: %w", err)
		}
		r.pg, r.world, r.rank = pg, pg.Size(), pg.Rank()
	}
	return r, nil
}

// Rank returns this process's rank, 0 when training alone.
func (r *Run) Rank() int { return r.rank }

// World returns the number of ranks, 1 when training alone.
func (r *Run) World() int { return r.world }

// Group returns the process group, nil when training alone.
func (r *Run) Group() *distributed.Group { return r.pg }

// Logger returns the run's logger (Config.Logger or the default one).
func (r *Run) Logger() *slog.Logger { return r.log }

// Out returns where the program's own lines go so that they print above
// the progress display: Config.Out until Train draws one.
func (r *Run) Out() io.Writer { return r.lines }

// Precision returns the precision the matmuls run in: "fp32", "bf16" or
// "bf16-emulated".
func (r *Run) Precision() string { return r.cfg.Precision }

// Model is what a training step uses of the model it trains: the forward
// pass and the parameters the optimizer steps. *ddp.Model implements it.
type Model interface {
	Forward(x *tensor.Tensor) *tensor.Tensor
	Parameters() []*tensor.Tensor
}

// alone is the Model of a run without a group: the module itself.
type alone struct {
	nn.Module
	params []*tensor.Tensor
}

func (a alone) Parameters() []*tensor.Tensor { return a.params }

// Wrap returns the model to train on this rank. Alone it is model
// itself; with a group it is model wrapped in DDP (ddp.New with opts
// after ddp.GradientAsBucketView(true)), which checks that every rank
// built the same model, copies rank 0's weights to all and has each
// Backward average the gradients. Keep model itself for what the
// replica does outside training: evaluating, sampling, saving. Close
// releases the wrapper; a program wraps one model per Run.
//
// With Config.Sharding it is model wrapped in fsdp (ddp/fsdp, its
// default units), whose Parameters are this rank's shards: group them
// with DecayGroups or ParamDim and clip with ClipGradNorm; model itself
// then holds no whole copy of the weights, and what the program runs of
// it outside the steps goes through WithModel. With
// Config.LocalSGD or DiLoCo it is model itself, which Train wraps in
// ddp/localsgd once it has the optimizer. Both reduce in float32 and
// take no DDP option: opts other than a plain allreduce are for a
// caller to refuse (the command line does).
func (r *Run) Wrap(ctx context.Context, model nn.Module, opts ...ddp.Option) (Model, error) {
	if r.dm != nil || r.fm != nil || r.localModule != nil {
		panic("harness: Wrap: the run has wrapped a model already")
	}
	r.module = model
	if r.ft != nil && r.cfg.syncEvery() > 0 {
		// Fault-tolerant DiLoCo or LocalSGD: each outer step's quorum has
		// its own group (see Run.outerFT).
		r.localModule, r.params = model, nn.Parameters(model)
		return alone{model, r.params}, nil
	}
	if r.pg == nil {
		if r.cfg.sharded() || r.cfg.syncEvery() > 0 {
			r.log.Info("one rank: nothing to shard or sync; training the model as it is")
		}
		r.params = nn.Parameters(model)
		return alone{model, r.params}, nil
	}
	switch {
	case r.cfg.sharded():
		return r.wrapSharded(ctx, model)
	case r.cfg.syncEvery() > 0:
		r.localModule, r.params = model, nn.Parameters(model)
		return alone{model, r.params}, nil
	}
	dm, err := ddp.New(ctx, model, r.pg, append([]ddp.Option{ddp.GradientAsBucketView(true)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("harness: wrapping the model in DDP: %w", err)
	}
	r.dm, r.params = dm, dm.Parameters()
	return dm, nil
}

// Autocast runs f with the matmuls and convolutions in the run's
// precision (Config.Precision): for bf16, under tensor.Autocast, whose
// ops record it so that their backward, run after f returns, rounds as
// their forward did. A step runs its forward pass and loss in it, and an
// evaluation its forward passes.
func (r *Run) Autocast(f func()) {
	if !r.bf16 {
		f()
		return
	}
	if err := tensor.Autocast(tensor.BF16, f); err != nil {
		// Start checked that bf16 runs here; losing it is a bug.
		panic("harness: " + err.Error())
	}
}

// sidecar is what a training checkpoint carries besides the model, the
// optimizer, the scheduler and the counters: the sampler's place and the
// program's own Extra.
type sidecar struct {
	Sampler data.SamplerState `json:"sampler"`
	Extra   json.RawMessage   `json:"extra,omitempty"`
}

// Resume loads rank 0's last training checkpoint (Config.Save's) into
// l.State and l.Sampler on every rank, if Config.Resume asks for it and
// rank 0 has one: every rank gets the same weights, optimizer and
// scheduler state, counters and place in the data, over the group, so
// ranks need no shared file system. It returns the world size the
// checkpoint was saved in (0 without one, or if its sampler did not
// record it): a checkpoint of another world
// resumes with the rest of its epoch re-sharded, and what the program
// scaled to the world (a learning rate) is for it to rescale. Train
// resumes first unless the program has called Resume.
//
// Of a training checkpoint and a sharded one (ShardedDir) it loads the
// one rank 0 wrote last; a sharded checkpoint loads at any world size,
// into a sharded run or a DDP one, and a DDP checkpoint into a sharded
// run too, every rank keeping its shards of the model and of the
// optimizer's state. With Config.LocalSGD or DiLoCo it first wraps the model
// (see Wrap) with l.State.Optimizer as the inner optimizer and sets
// l.State.CommHook to the wrapper, so that checkpoints carry its state.
func (r *Run) Resume(ctx context.Context, l *Loop) (world int, err error) {
	r.resumed = true
	if r.optParams == nil {
		r.optParams = r.params
	}
	if r.localModule != nil {
		l.check()
		if err := r.startLocal(ctx, l); err != nil {
			return 0, err
		}
	}
	if !r.cfg.Resume {
		return 0, nil
	}
	l.check()
	kind, err := r.newestCheckpoint(ctx)
	if err != nil {
		return 0, err
	}
	switch {
	case kind == shardedCheckpoint:
		sc, err := r.resumeSharded(ctx, l)
		if err != nil {
			return 0, err
		}
		if err := r.restoreSidecar(l, sc, ShardedDir(r.cfg.Save)); err != nil {
			return 0, err
		}
		r.log.Info("resumed", "checkpoint", ShardedDir(r.cfg.Save), "epoch", l.State.Epoch, "step", l.State.Step)
		return sc.Sampler.Replicas, nil
	case kind == trainingCheckpoint && r.fm != nil:
		sc, err := r.resumeFromDDP(ctx, l)
		if err != nil {
			return 0, err
		}
		if sc == nil {
			r.log.Info("no checkpoint yet; starting fresh", "checkpoint", r.cfg.Save)
			return 0, nil
		}
		if err := r.restoreSidecar(l, sc, r.cfg.Save); err != nil {
			return 0, err
		}
		r.log.Info("resumed", "checkpoint", r.cfg.Save, "epoch", l.State.Epoch, "step", l.State.Step)
		return sc.Sampler.Replicas, nil
	}
	var g checkpoint.Group // a nil *distributed.Group would not be a nil Group
	if r.pg != nil {
		g = r.pg
	}
	sc := &sidecar{}
	st := *l.State
	st.Extra = sc
	found, err := checkpoint.ResumeFrom(ctx, g, r.cfg.Save, &st)
	if err != nil {
		return 0, fmt.Errorf("harness: resuming: %w", err)
	}
	if !found {
		r.log.Info("no checkpoint yet; starting fresh", "checkpoint", r.cfg.Save)
		return 0, nil
	}
	l.State.Epoch, l.State.Step = st.Epoch, st.Step
	if err := r.restoreSidecar(l, sc, r.cfg.Save); err != nil {
		return 0, err
	}
	r.log.Info("resumed", "checkpoint", r.cfg.Save, "epoch", st.Epoch, "step", st.Step)
	return sc.Sampler.Replicas, nil
}

// restoreSidecar puts the sampler's place and the program's Extra of a
// checkpoint (from where) back into l.
func (r *Run) restoreSidecar(l *Loop, sc *sidecar, where string) error {
	if err := l.Sampler.Restore(sc.Sampler); err != nil {
		return fmt.Errorf("harness: resuming the sampler from %s: %w", where, err)
	}
	if extra := l.State.Extra; extra != nil && len(sc.Extra) > 0 {
		// Decoded aside first: a value that does not fit leaves Extra as it was.
		v := reflect.New(reflect.TypeOf(extra).Elem())
		if err := json.Unmarshal(sc.Extra, v.Interface()); err != nil {
			return fmt.Errorf("harness: resuming Extra from %s: %w", where, err)
		}
		reflect.ValueOf(extra).Elem().Set(v.Elem())
	}
	return nil
}

// sidecarOf is what a checkpoint of l carries besides the tensors.
func (r *Run) sidecarOf(l *Loop) (*sidecar, error) {
	sc := &sidecar{Sampler: l.Sampler.State()}
	if l.State.Extra != nil {
		b, err := json.Marshal(l.State.Extra)
		if err != nil {
			return nil, fmt.Errorf("harness: encoding Extra: %w", err)
		}
		sc.Extra = b
	}
	return sc, nil
}

// stateGatherer is a comm hook state spread over the ranks
// (*ddp.PowerSGD's error feedback), which every rank gathers before rank
// 0 saves it.
type stateGatherer interface {
	GatherState(ctx context.Context, g ddp.Group) error
}

// checkpoint has rank 0 save l's state, with Config.Save, outside m's
// clock (a span of the timeline). Every rank calls it at the same step.
func (r *Run) checkpoint(ctx context.Context, m *meter, l *Loop) error {
	if r.cfg.Save == "" {
		return nil
	}
	if r.fm != nil {
		return m.untimed("checkpoint", func() error { return r.saveSharded(ctx, l) })
	}
	if sg, ok := l.State.CommHook.(stateGatherer); ok && r.pg != nil {
		err := m.untimed("checkpoint", func() error { return sg.GatherState(ctx, r.pg) })
		if err != nil {
			return fmt.Errorf("harness: gathering the comm hook's state: %w", err)
		}
	}
	if r.rank != 0 {
		return nil
	}
	return m.untimed("checkpoint", func() error {
		sc, err := r.sidecarOf(l)
		if err != nil {
			return err
		}
		st := *l.State
		st.Extra = sc
		if err := checkpoint.SaveTraining(r.cfg.Save, st); err != nil {
			return fmt.Errorf("harness: %w", err)
		}
		return nil
	})
}

// reporter returns the run's progress reporter, made on first use: with
// Config.Progress, or under a launcher whose events pipe carries metrics
// and the summary; nil otherwise.
func (r *Run) reporter(tokens bool) *progress.Reporter {
	if r.rep != nil || !r.cfg.Progress && os.Getenv(event.EnvFD) == "" {
		return r.rep
	}
	opts := []progress.Option{progress.Output(r.cfg.Out), progress.Rank(r.rank)}
	if r.cfg.LogEvery > 0 {
		opts = append(opts, progress.LogEvery(r.cfg.LogEvery))
	}
	if tokens {
		opts = append(opts, progress.Tokens())
	}
	rep := progress.FromEnv(opts...)
	if !r.cfg.Progress && !rep.Launched() {
		_ = rep.Close() // a stale variable: nothing to send to
		return nil
	}
	r.rep = rep
	r.lines.set(rep.Writer())
	return rep
}

// maxEventText is the longest summary text sent in an event, well within
// the launcher's 64 KiB event lines.
const maxEventText = 32 << 10

// Report delivers rank 0's summary of the run once training is over:
// as its last event to a launcher that prints the summary itself (see
// event.EnvSummary), or else written to Config.Summary as s.Text and
// the line s.Line(). If a step's loss or gradient norm was NaN or
// infinite, the summary ends with their count, nan_steps (and, under
// Config.OnNaN skip, skipped_steps). On other ranks it does nothing. Call
// it before Close.
func (r *Run) Report(s event.Summary) error {
	if r.rank != 0 {
		return nil
	}
	r.summariseRun(&s)  // sharding, sync and each rank's peak RSS
	r.nan.summarise(&s) // nan_steps and skipped_steps, if a step was not finite
	r.ft.summarise(&s)  // failures_survived, steps_lost and heals, under FT
	if os.Getenv(event.EnvSummary) != "" {
		if rep := r.reporter(false); rep != nil && rep.Launched() {
			if len(s.Text) > maxEventText && r.cfg.Summary != nil {
				// Too long for an event line: printed as it is, before.
				if _, err := io.WriteString(r.cfg.Summary, s.Text); err != nil {
					return fmt.Errorf("harness: writing the summary: %w", err)
				}
				s.Text = ""
			}
			if err := rep.Emit(event.KindSummary, s); err != nil {
				return fmt.Errorf("harness: %w", err)
			}
			return nil
		}
	}
	if r.cfg.Summary == nil {
		return nil
	}
	if _, err := io.WriteString(r.cfg.Summary, s.Text+s.Line()+"\n"); err != nil {
		return fmt.Errorf("harness: writing the summary: %w", err)
	}
	return nil
}

// Close ends the run: it releases the DDP wrapper, leaves the process
// group (whose error it returns) and ends the progress reporting. A
// second Close does nothing.
func (r *Run) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	if r.dm != nil {
		r.dm.Close()
	}
	if r.fm != nil {
		_ = r.fm.Close() // its error is the group's, which Destroy returns
	}
	if r.lm != nil {
		_ = r.lm.Close()
	}
	var err error
	if r.pg != nil {
		err = r.pg.Destroy()
	}
	if r.ft != nil {
		err = r.ft.close()
	}
	if r.rep != nil {
		_ = r.rep.Close() // the launcher's pipe; nothing to do if it broke
		r.lines.set(r.cfg.Out)
	}
	if r.emulating {
		tensor.SetBF16Emulation(r.prevEmulation)
	}
	return err
}

// lineWriter is a writer whose destination changes: the program's
// lines and log records go to Out, or above the progress display while
// there is one.
type lineWriter struct {
	mu sync.Mutex // guards w
	w  io.Writer
}

func (l *lineWriter) set(w io.Writer) {
	l.mu.Lock()
	l.w = w
	l.mu.Unlock()
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	w := l.w
	l.mu.Unlock()
	return w.Write(p)
}

// ExitCode is the status a training program exits with after err, which
// it has printed: 0 for nil; event.ExitPeer when err is only the fallout
// of another rank's failure (distributed.Blame), after writing the
// event.PeerLine that names that rank to stderr as the program's last
// line, so that the launcher reports the rank that failed first instead
// of this one; otherwise 1.
func ExitCode(stderr io.Writer, err error) int {
	if err == nil {
		return 0
	}
	if pf, ok := distributed.Blame(err); ok {
		fmt.Fprintln(stderr, event.PeerLine(pf.Rank, pf.Silence))
		return event.ExitPeer
	}
	return 1
}
