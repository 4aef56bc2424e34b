package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"unsafe"
)

// Group is what ResumeFrom needs of a process group; *distributed.Group
// implements it. Broadcast copies root's buf to every rank and AllGather
// concatenates every rank's src into dst, in rank order; both take
// []int64 here.
type Group interface {
	Rank() int
	Size() int
	Broadcast(ctx context.Context, buf any, root int) error
	AllGather(ctx context.Context, dst, src any) error
}

// Resume statuses rank 0 broadcasts.
const (
	resumeNone   int64 = iota // no checkpoint: every rank starts afresh
	resumeFound               // the payload is the sidecar's bytes
	resumeFailed              // the payload is rank 0's error message
)

// ResumeFrom is LoadTraining for every rank of a job at once, with rank
// 0's checkpoint as the source of truth: rank 0 reads the sidecar
// TrainingPath(path) and broadcasts its bytes, and every rank loads them
// into its st, so ranks on machines without a shared file system (which
// lack the file, or hold a stale one) resume from the same point. It
// reports on every rank whether rank 0 had a checkpoint to resume from.
//
// Every rank returns an error if any fails: rank 0's (a corrupt file, a
// model file without its sidecar) is returned on every rank, and if a rank
// cannot load the state (a different model or optimizer), that rank
// returns its error and the others one naming it. A resume is never
// partial: on error every rank's st is as it was. A nil g, or a group of
// one, is LoadTraining with fs.ErrNotExist reported as (false, nil).
//
// Every rank of g must call ResumeFrom, as for any collective. While it
// loads, each rank holds the sidecar's bytes in memory besides the
// decoded tensors (rank 0 briefly twice).
func ResumeFrom(ctx context.Context, g Group, path string, st *TrainingState, opts ...Option) (bool, error) {
	if st == nil || st.Model == nil || st.Optimizer == nil {
		return false, fmt.Errorf("checkpoint: ResumeFrom %s: Model and Optimizer are required", path)
	}
	if g == nil || g.Size() == 1 {
		err := LoadTraining(path, st, opts...)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return err == nil, err
	}
	side, payload, found, err := fetchSidecar(ctx, g, path)
	if err != nil || !found {
		return false, err
	}
	name := side
	if g.Rank() != 0 {
		name = "rank 0's " + side
	}
	undo, loadErr := loadTrainingBytes(name, payload, st, newReadConfig(opts))
	failed, err := agree(ctx, g, loadErr != nil)
	if err == nil && len(failed) == 0 {
		return true, nil
	}
	if undo != nil {
		undo()
	}
	switch {
	case loadErr != nil:
		return false, loadErr
	case err != nil:
		return false, fmt.Errorf("checkpoint: resuming from rank 0's %s: agreeing on the outcome: %w", side, err)
	}
	return false, fmt.Errorf("checkpoint: resuming from rank 0's %s: rank(s) %v could not load it (their errors say why); no rank resumed", side, failed)
}

// fetchSidecar is rank 0's sidecar of path on every rank of g (a group
// of two or more): its name, its bytes, and whether rank 0 has one. Rank
// 0's error reading it is every rank's.
func fetchSidecar(ctx context.Context, g Group, path string) (string, []byte, bool, error) {
	// Rank 0 sends its status, its sidecar's name (errors on every rank
	// name the file that was read) and the sidecar's bytes or its error.
	side := TrainingPath(path)
	var status int64
	var payload []byte
	var readErr error
	if g.Rank() == 0 {
		status, payload, readErr = readForResume(path)
		payload = append([]byte(side), payload...)
	}
	head := []int64{status, int64(len(side)), int64(len(payload))}
	if err := g.Broadcast(ctx, head, 0); err != nil {
		return "", nil, false, fmt.Errorf("checkpoint: resuming from %s: broadcasting rank 0's status: %w", path, err)
	}
	payload, err := broadcastBytes(ctx, g, payload, head[2])
	if err != nil {
		return "", nil, false, fmt.Errorf("checkpoint: resuming from %s: broadcasting rank 0's training state: %w", path, err)
	}
	if head[1] < 0 || head[1] > int64(len(payload)) {
		return "", nil, false, fmt.Errorf("checkpoint: resuming from %s: rank 0 sent a name of %d bytes in a payload of %d (another version of gotrain?)", path, head[1], len(payload))
	}
	side, payload = string(payload[:head[1]]), payload[head[1]:]
	switch head[0] {
	case resumeNone:
		return side, nil, false, nil
	case resumeFailed:
		if readErr != nil {
			return "", nil, false, readErr
		}
		return "", nil, false, fmt.Errorf("checkpoint: rank 0 cannot resume: %s", payload)
	}
	return side, payload, true, nil
}

// readForResume is rank 0's part: the status to broadcast, the sidecar's
// bytes (or the error's text), and the error itself.
func readForResume(path string) (int64, []byte, error) {
	err := checkSidecarExists(path)
	if errors.Is(err, fs.ErrNotExist) {
		return resumeNone, nil, nil
	}
	var data []byte
	if err == nil {
		if data, err = os.ReadFile(TrainingPath(path)); err != nil {
			err = fmt.Errorf("checkpoint: %w", err)
		}
	}
	if err != nil {
		return resumeFailed, []byte(err.Error()), err
	}
	return resumeFound, data, nil
}

// loadTrainingBytes loads a sidecar file held in data, as LoadTraining
// loads one from disk, and returns how to undo it.
func loadTrainingBytes(name string, data []byte, st *TrainingState, cfg readConfig) (func(), error) {
	entries, meta, err := readNamed(name, bytes.NewReader(data), int64(len(data)), cfg)
	if err != nil {
		return nil, err
	}
	return applyTraining(name, entries, meta, st)
}

// broadcastBytes sends rank 0's data (n bytes) to every rank, as int64
// words: the element types a Group carries.
func broadcastBytes(ctx context.Context, g Group, data []byte, n int64) ([]byte, error) {
	if n == 0 {
		return nil, nil
	}
	words := make([]int64, (n+7)/8)
	buf := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), 8*len(words))[:n]
	if g.Rank() == 0 {
		copy(buf, data)
	}
	if err := g.Broadcast(ctx, words, 0); err != nil {
		return nil, err
	}
	return buf, nil
}

// agree tells every rank which ranks failed.
func agree(ctx context.Context, g Group, failed bool) ([]int, error) {
	mine := []int64{0}
	if failed {
		mine[0] = 1
	}
	all := make([]int64, g.Size())
	if err := g.AllGather(ctx, all, mine); err != nil {
		return nil, err
	}
	var ranks []int
	for r, f := range all {
		if f != 0 {
			ranks = append(ranks, r)
		}
	}
	return ranks, nil
}
