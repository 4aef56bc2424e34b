package nn

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/tensor"
)

func threeLinear() *SequentialLayer {
	return Sequential(Linear(4, 6), ReLU(), Linear(6, 5), ReLU(), Linear(5, 3, NoBias()))
}

func TestStateDictOrderAndSharing(t *testing.T) {
	m := threeLinear()
	var names []string
	for _, e := range StateDict(m) {
		names = append(names, e.Name)
		if e.Dtype != Float32 {
			t.Errorf("%s has dtype %s", e.Name, e.Dtype)
		}
	}
	want := []string{"0.weight", "0.bias", "2.weight", "2.bias", "4.weight"}
	if !slices.Equal(names, want) {
		t.Fatalf("state dict names %v, want %v", names, want)
	}
	// Entries share storage with the model, like PyTorch's state_dict.
	StateDict(m)[0].Tensor.Data()[0] = 42
	if m.At(0).(*LinearLayer).Weight.Data()[0] != 42 {
		t.Error("StateDict entry does not share storage with the parameter")
	}
}

func cloneState(m Module) map[string]*tensor.Tensor {
	sd := make(map[string]*tensor.Tensor)
	for _, e := range StateDict(m) {
		sd[e.Name] = e.Tensor.Clone()
	}
	return sd
}

func TestLoadStateDictRoundTripCopiesInPlace(t *testing.T) {
	SetSeed(1)
	src := threeLinear()
	SetSeed(2)
	dst := threeLinear()
	before := Parameters(dst)
	if slices.Equal(before[0].Data(), Parameters(src)[0].Data()) {
		t.Fatal("different seeds gave equal weights")
	}
	if err := LoadStateDict(dst, cloneState(src), true); err != nil {
		t.Fatal(err)
	}
	after := Parameters(dst)
	for i := range after {
		if after[i] != before[i] {
			t.Errorf("parameter %d was replaced instead of copied into", i)
		}
		if !slices.Equal(after[i].Data(), Parameters(src)[i].Data()) {
			t.Errorf("parameter %d not loaded", i)
		}
	}
}

func TestLoadStateDictListsAllProblemsSortedAndChangesNothing(t *testing.T) {
	m := threeLinear()
	orig := cloneState(m)
	sd := cloneState(m)
	delete(sd, "2.bias")
	delete(sd, "0.bias")
	sd["9.weight"] = tensor.Zeros(1)
	sd["1.weight"] = tensor.Zeros(2)
	sd["4.weight"] = tensor.Zeros(3, 4)
	sd["2.weight"] = tensor.Zeros(5, 7)
	sd["0.weight"] = tensor.Full(7, 6, 4) // valid: must not be copied either

	err := LoadStateDict(m, sd, true)
	want := "nn: load state dict: 2 missing keys [0.bias 2.bias]; 2 unexpected keys [1.weight 9.weight]; " +
		"2 shape mismatches: 2.weight: have [5 6], got [5 7]; 4.weight: have [3 5], got [3 4]"
	if err == nil || err.Error() != want {
		t.Fatalf("error\n %v\nwant\n %s", err, want)
	}
	if !errors.Is(err, ErrStateDict) {
		t.Error("error does not match ErrStateDict")
	}
	var serr *StateDictError
	if !errors.As(err, &serr) || len(serr.Mismatched) != 2 || serr.Mismatched[0].Key != "2.weight" {
		t.Errorf("errors.As gave %+v", serr)
	}
	for _, e := range StateDict(m) {
		if !slices.Equal(e.Tensor.Data(), orig[e.Name].Data()) {
			t.Errorf("%s changed by a failed load", e.Name)
		}
	}
}

func TestLoadStateDictNonStrict(t *testing.T) {
	m := threeLinear()
	sd := map[string]*tensor.Tensor{
		"0.weight":   tensor.Full(0.5, 6, 4),
		"extra.bias": tensor.Zeros(3),
	}
	if err := LoadStateDict(m, sd, false); err != nil {
		t.Fatalf("non-strict load of a partial state dict: %v", err)
	}
	if got := m.At(0).(*LinearLayer).Weight.Data()[5]; got != 0.5 {
		t.Errorf("0.weight not loaded: %v", got)
	}
	// Shape mismatches are errors even without strict, as in PyTorch; the
	// missing and unexpected keys are not reported then.
	sd["2.bias"] = tensor.Zeros(4)
	sd["4.weight"] = nil
	err := LoadStateDict(m, sd, false)
	want := "nn: load state dict: 2 shape mismatches: 2.bias: have [5], got [4]; 4.weight: have [3 5], got nil tensor"
	if err == nil || err.Error() != want {
		t.Fatalf("error %v, want %s", err, want)
	}
}

func TestStateDictMapFeedsLoadStateDict(t *testing.T) {
	m := threeLinear()
	sd := StateDictMap(m)
	if len(sd) != 5 || sd["2.bias"] == nil {
		t.Fatalf("StateDictMap = %v", sd)
	}
	if err := LoadStateDict(m, sd, true); err != nil {
		t.Fatalf("loading a model's own state dict: %v", err)
	}
	if err := LoadStateDict(threeLinear(), sd, true); err != nil {
		t.Fatal(err)
	}
	if err := LoadStateDict(Sequential(Linear(4, 6)), sd, true); err == nil ||
		!strings.Contains(err.Error(), "3 unexpected keys [2.bias 2.weight 4.weight]") {
		t.Errorf("loading into a smaller model: %v", err)
	}
}

// A state dict of another model is a short error: counts and the first
// few keys of each kind, however large the models.
func TestStateDictErrorIsShort(t *testing.T) {
	var layers []Module
	for range 40 {
		layers = append(layers, Linear(3, 3))
	}
	m := Sequential(layers...)
	sd := map[string]*tensor.Tensor{}
	for i := range 50 {
		sd[fmt.Sprintf("other.%d.weight", i)] = tensor.Zeros(1)
	}
	for i := range 10 {
		sd[fmt.Sprintf("%d.weight", i)] = tensor.Zeros(2, 2)
	}
	err := LoadStateDict(m, sd, true)
	var serr *StateDictError
	if !errors.As(err, &serr) || len(serr.Missing) != 70 || len(serr.Unexpected) != 50 || len(serr.Mismatched) != 10 {
		t.Fatalf("err = %v; want all 70 missing, 50 unexpected and 10 mis-shaped keys in the fields", err)
	}
	want := "nn: load state dict: 70 missing keys [0.bias 1.bias 10.bias ...and 67 more]; " +
		"50 unexpected keys [other.0.weight other.1.weight other.10.weight ...and 47 more]; " +
		"10 shape mismatches: 0.weight: have [3 3], got [2 2]; 1.weight: have [3 3], got [2 2]; " +
		"2.weight: have [3 3], got [2 2]; and 7 more"
	if err.Error() != want {
		t.Fatalf("error\n %v\nwant\n %s", err, want)
	}
}
