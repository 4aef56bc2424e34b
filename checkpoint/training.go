package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// trainingVersion is the sidecar format; LoadTraining rejects others.
// Version 2 carries the model's tensors itself.
const trainingVersion = "2"

// modelPrefix names the model's tensors inside the sidecar.
const modelPrefix = "model."

// hookPrefix names the comm hook's tensors and metadata inside the sidecar.
const hookPrefix = "commhook."

// Stateful is state that a training checkpoint carries besides the
// model's, the optimizer's and the scheduler's, such as a DDP comm hook's
// (*ddp.PowerSGD).
type Stateful interface {
	StateDict() optim.State
	LoadStateDict(optim.State) error
}

// TrainingState is everything a training run needs to carry on where it
// stopped. Model and Optimizer are required; Scheduler is optional.
type TrainingState struct {
	Model     nn.Module
	Optimizer optim.Optimizer
	Scheduler optim.Scheduler

	// Epoch and Step are the training loop's counters, saved as given.
	Epoch int
	Step  int64
	// Extra is anything else worth resuming (a sampler's position, the
	// best accuracy so far, an RNG seed...). SaveTraining stores its JSON
	// encoding; LoadTraining decodes into it, so pass a pointer there.
	// Nil saves and loads nothing.
	Extra any
	// CommHook, if set, is the state of the DDP comm hook (PowerSGD's
	// step count, Q matrices and error feedback), saved under
	// "commhook." names. A checkpoint without such state leaves
	// CommHook as it is on load, and one with it loads without a
	// CommHook: a resumed run may change its comm hook.
	CommHook Stateful
}

// TrainingPath returns the name of the sidecar file SaveTraining writes
// beside the model file at path: "run/model.safetensors" →
// "run/model.train.safetensors".
func TrainingPath(path string) string {
	return strings.TrimSuffix(path, ".safetensors") + ".train.safetensors"
}

// SaveTraining writes a training checkpoint as two files, committed
// together:
//
//  1. path: the model's state dict, exactly as Save writes it, so the file
//     loads into PyTorch like any model checkpoint;
//  2. TrainingPath(path): a safetensors file holding everything a resume
//     needs — the model's tensors again ("model.<name>"), the optimizer's
//     state ("state.<i>.<buffer>") — and, in its metadata, the optimizer's
//     hyper-parameters ("optimizer.*"), the scheduler's state
//     ("scheduler.*"), Epoch, Step and the JSON of Extra.
//
// Both files are written in full to temporary files beside them and
// fsynced before either is renamed into place, so a failed write (a full
// disk, an I/O error) leaves the previous pair as it was, or no file at
// all on a first save: never a model file without its training state.
// Then the training state is renamed first, and the model file after
// it, and the directory is fsynced. The training state is self-contained
// and is the commit record: a crash between the two renames leaves the
// new training state beside the previous model file, and LoadTraining
// resumes from the new save whatever happened to the model file.
func SaveTraining(path string, st TrainingState) error {
	if st.Model == nil || st.Optimizer == nil {
		return fmt.Errorf("checkpoint: SaveTraining %s: Model and Optimizer are required", path)
	}
	extra, err := json.Marshal(st.Extra)
	if err != nil {
		return fmt.Errorf("checkpoint: SaveTraining %s: encoding Extra: %w", path, err)
	}
	model := modelEntries(st.Model)
	meta := map[string]string{
		"gotrain.training": trainingVersion,
		"epoch":            strconv.Itoa(st.Epoch),
		"step":             strconv.FormatInt(st.Step, 10),
		"extra":            string(extra),
	}
	optState := st.Optimizer.StateDict()
	for k, v := range optState.Meta {
		meta["optimizer."+k] = v
	}
	if st.Scheduler != nil {
		for k, v := range st.Scheduler.StateDict().Meta {
			meta["scheduler."+k] = v
		}
	}
	entries := make([]Entry, 0, len(model)+len(optState.Tensors))
	for _, e := range model {
		e.Name = modelPrefix + e.Name
		entries = append(entries, e)
	}
	for _, name := range slices.Sorted(maps.Keys(optState.Tensors)) {
		entries = append(entries, Entry{Name: name, Tensor: optState.Tensors[name]})
	}
	if st.CommHook != nil {
		hook := st.CommHook.StateDict()
		for k, v := range hook.Meta {
			meta[hookPrefix+k] = v
		}
		for _, name := range slices.Sorted(maps.Keys(hook.Tensors)) {
			entries = append(entries, Entry{Name: hookPrefix + name, Tensor: hook.Tensors[name]})
		}
	}

	side := TrainingPath(path)
	sideTmp, err := writeTemp(side, func(w io.Writer) error { return writeTensors(w, entries, meta) })
	if err != nil {
		return err
	}
	modelTmp, err := writeTemp(path, func(w io.Writer) error { return writeTensors(w, model, modelMeta) })
	if err != nil {
		os.Remove(sideTmp)
		return err
	}
	if err := os.Rename(sideTmp, side); err != nil {
		os.Remove(sideTmp)
		os.Remove(modelTmp)
		return fmt.Errorf("checkpoint: writing %s: %w", side, err)
	}
	if err := os.Rename(modelTmp, path); err != nil {
		os.Remove(modelTmp)
		return fmt.Errorf("checkpoint: writing %s: %w (its training state %s is saved: a resume carries on from this save)", path, err, side)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("checkpoint: writing %s: fsync directory: %w", path, err)
	}
	return nil
}

// LoadTraining resumes from the checkpoint SaveTraining wrote at path. It
// reads and validates the sidecar TrainingPath(path) — the model file is
// not needed — then loads the model (strictly, as Load), the optimizer's
// state, the scheduler's state and the counters, and, if st.Extra is a
// non-nil pointer, replaces the value it points to with the saved Extra.
// The tensors are checked as ReadTensorsFile checks them (opts).
//
// When neither file exists, the error wraps fs.ErrNotExist (the usual sign
// that there is nothing to resume yet). A model file without its sidecar
// is a different error, naming both files: starting afresh would
// overwrite a trained model at the next save. A scheduler saved but not
// given, or given but not saved, is an error. On any error nothing is
// changed: not the model, the optimizer, the scheduler, the counters nor
// Extra.
func LoadTraining(path string, st *TrainingState, opts ...Option) error {
	if st == nil || st.Model == nil || st.Optimizer == nil {
		return fmt.Errorf("checkpoint: LoadTraining %s: Model and Optimizer are required", path)
	}
	side := TrainingPath(path)
	if err := checkSidecarExists(path); err != nil {
		return err
	}
	sideEntries, meta, err := ReadTensorsFile(side, opts...)
	if err != nil {
		return err
	}
	_, err = applyTraining(side, sideEntries, meta, st)
	return err
}

// checkSidecarExists returns nil if path's sidecar exists, an error
// wrapping fs.ErrNotExist if neither it nor path does, and an error naming
// both if only the model file does.
func checkSidecarExists(path string) error {
	side := TrainingPath(path)
	_, err := os.Stat(side)
	if !errors.Is(err, fs.ErrNotExist) {
		return nil // there, or an error ReadTensorsFile reports better
	}
	if _, merr := os.Stat(path); merr == nil {
		return fmt.Errorf("checkpoint: cannot resume from %s: its training state %s does not exist "+
			"(the model file alone cannot resume the optimizer, schedule and data position; "+
			"move the model file away to start afresh)", path, side)
	}
	return fmt.Errorf("checkpoint: %w", err)
}

// applyTraining loads the sidecar side's content into st, all or nothing,
// and returns a function that puts st back as it was.
func applyTraining(side string, sideEntries []Entry, meta map[string]string, st *TrainingState) (undo func(), err error) {
	saved, err := parseSidecar(side, sideEntries, meta)
	if err != nil {
		return nil, err
	}
	extraVal, err := decodeExtra(side, st.Extra, saved.extra)
	if err != nil {
		return nil, err
	}
	undoLoad, err := loadSaved(side, st, saved)
	if err != nil {
		return nil, err
	}
	epoch, step := st.Epoch, st.Step
	var extraBefore reflect.Value
	st.Epoch, st.Step = saved.epoch, saved.step
	if extraVal.IsValid() {
		dst := reflect.ValueOf(st.Extra).Elem()
		extraBefore = reflect.New(dst.Type())
		extraBefore.Elem().Set(dst)
		dst.Set(extraVal.Elem())
	}
	return func() {
		undoLoad()
		st.Epoch, st.Step = epoch, step
		if extraBefore.IsValid() {
			reflect.ValueOf(st.Extra).Elem().Set(extraBefore.Elem())
		}
	}, nil
}

// savedTraining is a sidecar's content, parsed and validated.
type savedTraining struct {
	epoch     int
	step      int64
	extra     string // JSON
	model     []Entry
	optState  optim.State
	schedMeta map[string]string
	hook      optim.State // empty if none was saved
}

// sidecarError is an error about the sidecar file side.
func sidecarError(side, format string, args ...any) error {
	return fmt.Errorf("checkpoint: %s: "+format, append([]any{side}, args...)...)
}

// parseSidecar checks the sidecar side's version and counters and sorts
// its tensors and metadata into the model's, the optimizer's and the
// scheduler's.
func parseSidecar(side string, sideEntries []Entry, meta map[string]string) (savedTraining, error) {
	var saved savedTraining
	if v := meta["gotrain.training"]; v != trainingVersion {
		return saved, sidecarError(side, "not a gotrain training state (version %q, want %q)", v, trainingVersion)
	}
	var err error
	if saved.epoch, err = strconv.Atoi(meta["epoch"]); err != nil {
		return saved, sidecarError(side, "epoch %q is not an integer", meta["epoch"])
	}
	if saved.step, err = strconv.ParseInt(meta["step"], 10, 64); err != nil {
		return saved, sidecarError(side, "step %q is not an integer", meta["step"])
	}
	extra, ok := meta["extra"]
	if !ok || !json.Valid([]byte(extra)) {
		return saved, sidecarError(side, "extra is missing or not JSON")
	}
	saved.extra = extra
	saved.optState = optim.State{Tensors: map[string]*tensor.Tensor{}, Meta: map[string]string{}}
	saved.schedMeta = map[string]string{}
	saved.hook = optim.State{Tensors: map[string]*tensor.Tensor{}, Meta: map[string]string{}}
	for k, v := range meta {
		if name, ok := strings.CutPrefix(k, "optimizer."); ok {
			saved.optState.Meta[name] = v
		} else if name, ok := strings.CutPrefix(k, "scheduler."); ok {
			saved.schedMeta[name] = v
		} else if name, ok := strings.CutPrefix(k, hookPrefix); ok {
			saved.hook.Meta[name] = v
		}
	}
	for _, e := range sideEntries {
		if name, ok := strings.CutPrefix(e.Name, modelPrefix); ok {
			e.Name = name
			saved.model = append(saved.model, e)
		} else if name, ok := strings.CutPrefix(e.Name, hookPrefix); ok {
			saved.hook.Tensors[name] = e.Tensor
		} else {
			saved.optState.Tensors[e.Name] = e.Tensor
		}
	}
	return saved, nil
}

// decodeExtra decodes the saved JSON extra into a fresh value of the type
// dst points to, so that a failure cannot leave the caller's half-filled.
// It returns the zero Value when there is nothing to decode.
func decodeExtra(side string, dst any, extra string) (reflect.Value, error) {
	if dst == nil || extra == "null" {
		return reflect.Value{}, nil
	}
	rv := reflect.ValueOf(dst)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return reflect.Value{}, sidecarError(side, "cannot decode extra into %T: need a non-nil pointer", dst)
	}
	val := reflect.New(rv.Elem().Type())
	if err := json.Unmarshal([]byte(extra), val.Interface()); err != nil {
		return reflect.Value{}, sidecarError(side, "decoding extra into %T: %w", dst, err)
	}
	return val, nil
}

// loadSaved loads the model, the optimizer, the scheduler and the comm
// hook of st from saved, in that order. Each Load is all-or-nothing;
// snapshots undo the earlier ones if a later one fails, so a failed
// resume changes nothing, and the returned undo puts them all back.
func loadSaved(side string, st *TrainingState, saved savedTraining) (undo func(), err error) {
	modelBefore := snapshotModel(st.Model)
	optBefore := st.Optimizer.StateDict()
	var schedBefore optim.State
	if st.Scheduler != nil {
		schedBefore = st.Scheduler.StateDict()
	}
	restoreOpt := func() {
		if err := st.Optimizer.LoadStateDict(optBefore); err != nil {
			panic("checkpoint: restoring the optimizer's own state failed: " + err.Error())
		}
	}
	// The model first: a checkpoint of another model is best told as
	// such, not as the optimizer or scheduler that differ with it.
	if err := loadEntries(side, st.Model, saved.model); err != nil {
		return nil, err
	}
	if (len(saved.schedMeta) > 0) != (st.Scheduler != nil) {
		restoreModel(st.Model, modelBefore)
		if st.Scheduler == nil {
			return nil, sidecarError(side, "holds scheduler state (%s) but no Scheduler was given", saved.schedMeta["scheduler"])
		}
		return nil, sidecarError(side, "holds no scheduler state but a Scheduler was given")
	}
	if err := st.Optimizer.LoadStateDict(saved.optState); err != nil {
		restoreModel(st.Model, modelBefore)
		return nil, fmt.Errorf("checkpoint: %s: %w", side, err)
	}
	if st.Scheduler != nil {
		if err := st.Scheduler.LoadStateDict(optim.State{Meta: saved.schedMeta}); err != nil {
			restoreModel(st.Model, modelBefore)
			restoreOpt()
			return nil, fmt.Errorf("checkpoint: %s: %w", side, err)
		}
	}
	restoreSched := func() {
		if st.Scheduler != nil {
			if err := st.Scheduler.LoadStateDict(schedBefore); err != nil {
				panic("checkpoint: restoring the scheduler's own state failed: " + err.Error())
			}
		}
	}
	var hookBefore optim.State
	loadHook := st.CommHook != nil && len(saved.hook.Meta)+len(saved.hook.Tensors) > 0
	if loadHook {
		hookBefore = st.CommHook.StateDict()
		if err := st.CommHook.LoadStateDict(saved.hook); err != nil {
			restoreModel(st.Model, modelBefore)
			restoreOpt()
			restoreSched()
			return nil, fmt.Errorf("checkpoint: %s: comm hook state: %w", side, err)
		}
	}
	return func() {
		restoreModel(st.Model, modelBefore)
		restoreOpt()
		restoreSched()
		if loadHook {
			if err := st.CommHook.LoadStateDict(hookBefore); err != nil {
				panic("checkpoint: restoring the comm hook's own state failed: " + err.Error())
			}
		}
	}, nil
}

// snapshotModel copies m's state dict.
func snapshotModel(m nn.Module) map[string]*tensor.Tensor {
	sd := nn.StateDict(m)
	out := make(map[string]*tensor.Tensor, len(sd))
	for _, e := range sd {
		out[e.Name] = e.Tensor.Clone()
	}
	return out
}

// restoreModel puts back a snapshot taken of the same model, which cannot
// fail to fit.
func restoreModel(m nn.Module, snap map[string]*tensor.Tensor) {
	if err := nn.LoadStateDict(m, snap, true); err != nil {
		panic("checkpoint: restoring the model's own state failed: " + err.Error())
	}
}
