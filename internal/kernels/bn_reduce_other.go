//go:build noasm || !amd64

package kernels

var bnReduce = bnReduceGeneric

// allBNReduces lists the loops bn_reduce_test.go compares with the
// generic ones: none without assembly.
func allBNReduces() []*bnReduceImpl { return nil }
