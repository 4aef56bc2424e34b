// Package testfixture reads the reference values that the
// testdata/gen_fixtures.py scripts of the tensor, nn and optim packages
// write with PyTorch, as JSON files under each package's testdata
// directory. Each package declares the struct its file decodes into; the
// tensors in it are Tensors.
package testfixture

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Tensor is a tensor as the scripts write it: its shape and its values in
// row-major order, in float64 (PyTorch computes the references in
// float64; inputs are values exact in float32).
type Tensor struct {
	Shape []int     `json:"shape"`
	Data  []float64 `json:"data"`
}

// Float32 returns the values converted to float32, in a new slice.
func (t Tensor) Float32() []float32 {
	d := make([]float32, len(t.Data))
	for i, v := range t.Data {
		d[i] = float32(v)
	}
	return d
}

// Read decodes testdata/name (relative to the package under test, the
// directory go test runs it in) into a new T.
func Read[T any](name string) (*T, error) {
	path := filepath.Join("testdata", name)
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("fixture: %w", err)
	}
	v := new(T)
	if err := json.Unmarshal(raw, v); err != nil {
		return nil, fmt.Errorf("fixture %s: %w", path, err)
	}
	return v, nil
}

// Load is Read that fails the test on an error.
func Load[T any](t testing.TB, name string) *T {
	t.Helper()
	v, err := Read[T](name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
