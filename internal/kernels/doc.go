// Package kernels holds the numeric inner loops of gotrain: SGEMM, im2col and
// the vector operations on hot paths (optimizers, activations, allreduce
// reductions). Each kernel has a portable Go implementation; on amd64 the
// fast paths are Go assembly chosen at run time from the CPU's features.
//
// All matrices are row-major. Callers own every slice they pass; kernels
// never retain them.
package kernels
