package nn

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/gotrain/gotrain/tensor"
)

// StateDict returns every parameter and buffer of m under its PyTorch name,
// in the order of PyTorch's state_dict(): a module's own parameters, then
// its own buffers, then each child's entries recursively, children in
// registration order. A tensor shared by several modules appears under each
// of its names, as in PyTorch.
//
// The entries share storage with the model (like PyTorch's state_dict,
// which returns detached references): Clone them to take a snapshot.
// Entries with Dtype Int64 (BatchNorm's "num_batches_tracked", a 0-d
// counter) hold their integer value as a float32; checkpoint writers must
// store them as int64 to stay loadable by PyTorch.
func StateDict(m Module) []Named {
	var out []Named
	walkState(m, func(e Named) { out = append(out, e) })
	return out
}

// walkState visits m's state entries in state_dict order with full names.
func walkState(m Module, visit func(Named)) {
	var ancestors []*Base
	var walk func(prefix string, m Module)
	walk = func(prefix string, m Module) {
		b := m.base()
		if slices.Contains(ancestors, b) {
			panic(fmt.Sprintf("nn: module %q contains itself", prefix))
		}
		ancestors = append(ancestors, b)
		for _, group := range [][]Named{b.params, b.buffers} {
			for _, e := range group {
				e.Name = join(prefix, e.Name)
				visit(e)
			}
		}
		for _, c := range b.children {
			walk(join(prefix, c.name), c.m)
		}
		ancestors = ancestors[:len(ancestors)-1]
	}
	walk("", m)
}

// ErrStateDict is matched (with errors.Is) by every error LoadStateDict
// returns; errors.As with *StateDictError gives the details.
var ErrStateDict = errors.New("nn: load state dict")

// StateDictError lists everything wrong with a state dict given to
// LoadStateDict. Each list is sorted by key.
type StateDictError struct {
	// Missing are the model's keys absent from the state dict.
	Missing []string
	// Unexpected are the state dict's keys the model does not have.
	Unexpected []string
	// Mismatched are keys present in both with different shapes.
	Mismatched []ShapeMismatch
}

// ShapeMismatch is one state-dict entry whose shape differs from the
// model's.
type ShapeMismatch struct {
	Key  string
	Have []int // the model's shape
	Got  []int // the state dict's shape (nil for a nil tensor)
}

// shownKeys is how many keys of each kind Error names.
const shownKeys = 3

// Error counts the problems of each kind and names the first few of
// each, for example "nn: load state dict: 2 missing keys [0.bias 2.bias];
// 1 unexpected key [9.weight]; 1 shape mismatch: 2.weight: have [10 512],
// got [10 256]". The fields hold them all.
func (e *StateDictError) Error() string {
	var parts []string
	if n := len(e.Missing); n > 0 {
		parts = append(parts, fmt.Sprintf("%d missing %s %s", n, plural(n, "key", "keys"), keyList(e.Missing)))
	}
	if n := len(e.Unexpected); n > 0 {
		parts = append(parts, fmt.Sprintf("%d unexpected %s %s", n, plural(n, "key", "keys"), keyList(e.Unexpected)))
	}
	if n := len(e.Mismatched); n > 0 {
		var shapes []string
		for _, m := range e.Mismatched[:min(n, shownKeys)] {
			got := "nil tensor"
			if m.Got != nil {
				got = fmt.Sprint(m.Got)
			}
			shapes = append(shapes, fmt.Sprintf("%s: have %v, got %s", m.Key, m.Have, got))
		}
		if n > shownKeys {
			shapes = append(shapes, fmt.Sprintf("and %d more", n-shownKeys))
		}
		parts = append(parts, fmt.Sprintf("%d shape %s: %s", n, plural(n, "mismatch", "mismatches"), strings.Join(shapes, "; ")))
	}
	return ErrStateDict.Error() + ": " + strings.Join(parts, "; ")
}

// keyList is the first shownKeys of keys in brackets, and how many more.
func keyList(keys []string) string {
	if len(keys) <= shownKeys {
		return "[" + strings.Join(keys, " ") + "]"
	}
	return fmt.Sprintf("[%s ...and %d more]", strings.Join(keys[:shownKeys], " "), len(keys)-shownKeys)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// Is makes errors.Is(err, ErrStateDict) true.
func (e *StateDictError) Is(target error) bool { return target == ErrStateDict }

// LoadStateDict copies the values of sd into m's parameters and buffers in
// place (so optimizers holding the tensors see the new values), matching
// keys by PyTorch name.
//
// Entries whose shape differs from the model's are always an error. With
// strict, keys missing from sd and keys of sd the model lacks are errors
// too; without it they are ignored. On error nothing is copied, the model
// is unchanged, and the *StateDictError lists every problem, sorted.
func LoadStateDict(m Module, sd map[string]*tensor.Tensor, strict bool) error {
	var targets []Named
	walkState(m, func(e Named) { targets = append(targets, e) })

	var serr StateDictError
	expected := make(map[string]bool, len(targets))
	for _, e := range targets {
		expected[e.Name] = true
		src, ok := sd[e.Name]
		switch {
		case !ok:
			serr.Missing = append(serr.Missing, e.Name)
		case src == nil:
			serr.Mismatched = append(serr.Mismatched, ShapeMismatch{Key: e.Name, Have: e.Tensor.Shape()})
		case !slices.Equal(src.Shape(), e.Tensor.Shape()):
			serr.Mismatched = append(serr.Mismatched, ShapeMismatch{
				Key: e.Name, Have: e.Tensor.Shape(), Got: slices.Clone(src.Shape()),
			})
		}
	}
	for k := range sd {
		if !expected[k] {
			serr.Unexpected = append(serr.Unexpected, k)
		}
	}
	sort.Strings(serr.Missing)
	sort.Strings(serr.Unexpected)
	sort.Slice(serr.Mismatched, func(i, j int) bool { return serr.Mismatched[i].Key < serr.Mismatched[j].Key })
	serr.Missing = slices.Compact(serr.Missing)
	serr.Mismatched = slices.CompactFunc(serr.Mismatched, func(a, b ShapeMismatch) bool { return a.Key == b.Key })
	if len(serr.Mismatched) > 0 || (strict && (len(serr.Missing) > 0 || len(serr.Unexpected) > 0)) {
		if !strict {
			serr.Missing, serr.Unexpected = nil, nil
		}
		return &serr
	}
	for _, e := range targets {
		if src, ok := sd[e.Name]; ok {
			copy(e.Tensor.Data(), src.Data())
		}
	}
	return nil
}

// StateDictMap returns StateDict(m) as a map from name to tensor, the form
// LoadStateDict takes.
func StateDictMap(m Module) map[string]*tensor.Tensor {
	sd := StateDict(m)
	out := make(map[string]*tensor.Tensor, len(sd))
	for _, e := range sd {
		out[e.Name] = e.Tensor
	}
	return out
}
