//go:build noasm || !amd64

package kernels

var bnRow = bnRowGeneric

// allBNRows lists the loops bn_row_test.go compares with the generic
// ones: none without assembly.
func allBNRows() []*bnRowImpl { return nil }
