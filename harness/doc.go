// Package harness is what every training program needs besides its
// model, its data, its loss and its evaluation: the checks of its
// configuration and environment, joining the process group (or training
// alone), the DistributedDataParallel wrapper, the training loop's
// bookkeeping (the throughput clock, the per-step profile, the progress
// bar, the metrics rows and the timeline), resuming and checkpointing,
// the peak memory, and the summary. `gotrain train mnist` and `gotrain
// train gpt` are programs on it (jobs/mnistjob, jobs/gptjob), and so can
// yours be.
//
// A program brings a Task, the classic PyTorch step and an evaluation:
//
//	type task struct {
//		model harness.Model // model itself, or its DDP wrapper
//		opt   optim.Optimizer
//		run   *harness.Run
//	}
//
//	func (t *task) Step(ctx context.Context, s harness.Step, b data.Batch) (float64, error) {
//		t.opt.ZeroGrad()
//		var loss *tensor.Tensor
//		t.run.Autocast(func() { loss = nn.CrossEntropy(t.model.Forward(b.X), b.Y) })
//		s.Forwarded()
//		if err := loss.Backward(); err != nil { // gradients averaged; a dead peer fails here
//			return 0, err
//		}
//		s.Backwarded()
//		t.opt.Step()
//		return float64(loss.Item()), nil
//	}
//
//	func (t *task) Evaluate(ctx context.Context) ([]harness.Metric, error) {
//		return []harness.Metric{{Name: "test_acc", Value: accuracy()}}, nil
//	}
//
// and the harness runs it, on one process or as one rank of many:
//
//	r, err := harness.Start(ctx, cfg) // joins the group if the environment names one
//	if err != nil { ... }
//	defer r.Close()
//	model := models.MLP()
//	m, err := r.Wrap(ctx, model) // DDP with a group, model itself alone
//	sampler := data.NewDistributedSampler(train.Len(), r.World(), r.Rank())
//	opt := optim.NewSGD(m.Parameters(), 0.01, optim.Momentum(0.9))
//	stats, err := r.Train(ctx, &task{m, opt, r}, harness.Loop{
//		Data: data.NewLoader(train, 64, sampler), Sampler: sampler,
//		State: &checkpoint.TrainingState{Model: model, Optimizer: opt},
//		Epochs: 3,
//	})
//	var s event.Summary
//	s.Add("world", "%d", stats.World)
//	s.Add("samples_per_s", "%.0f", stats.Throughput)
//	err = r.Report(s) // rank 0's last line, or its launcher's
//
// Train iterates the epochs from the resumed one, sets the sampler's
// epoch, runs each batch through Step, averages the ranks' losses at the
// end of every epoch (or every Loop.EvalEvery steps), has rank 0
// evaluate, reports, and has rank 0 checkpoint (Config.Save) at the end
// of every epoch and of the run and every Config.SaveEvery steps. With
// Config.Resume every rank first loads rank 0's last checkpoint: the
// weights, the optimizer and scheduler, the counters and the sampler's
// place in its epoch, so that a restarted job ends exactly as one that
// never stopped.
//
// Train reports each step once, to the progress display (the epoch's or
// evaluation interval's bar, the run's step of its total, its ETA) and
// to the metrics rows and the timeline. A program that writes its own
// loop gets the same from a Reporter: one End call a step.
//
// The zero Config works: it trains alone, or as a rank of the job that
// `gotrain run`, torchrun, Slurm, MPI or Kubeflow describe in the
// environment, in float32, printing rank 0's evaluations on standard
// error. A job's own Config embeds Config, so that a command line (and a
// struct literal) sets both.
//
// Under a launcher, workers draw nothing: progress, metrics rows, trace
// spans and the summary go to the launcher as events (package event),
// which renders them.
package harness
