package distributed

import (
	"fmt"
	"unsafe"

	"github.com/gotrain/gotrain/distributed/internal/transport"
	"github.com/gotrain/gotrain/internal/kernels"
)

// dtype is the element type of a buffer, as carried in frame headers.
type dtype uint8

const (
	float32T dtype = iota + 1
	float64T
	int32T
	int64T
)

func (d dtype) String() string {
	switch d {
	case float32T:
		return "float32"
	case float64T:
		return "float64"
	case int32T:
		return "int32"
	case int64T:
		return "int64"
	}
	if d == 0 {
		return "none"
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// size is the element size in bytes.
func (d dtype) size() int {
	if d == float32T || d == int32T {
		return 4
	}
	return 8
}

// flat is a typed buffer seen as bytes: the algorithms move and reduce
// bytes, and only the reduce function knows the element type.
type flat struct {
	dt    dtype
	n     int    // elements
	bytes []byte // n*dt.size() bytes aliasing the caller's slice
}

// view returns buf's bytes without copying. buf must be []float32,
// []float64, []int32 or []int64.
func view(buf any) (flat, error) {
	switch b := buf.(type) {
	case []float32:
		return flat{float32T, len(b), bytesOf(unsafe.Pointer(unsafe.SliceData(b)), len(b)*4)}, nil
	case []float64:
		return flat{float64T, len(b), bytesOf(unsafe.Pointer(unsafe.SliceData(b)), len(b)*8)}, nil
	case []int32:
		return flat{int32T, len(b), bytesOf(unsafe.Pointer(unsafe.SliceData(b)), len(b)*4)}, nil
	case []int64:
		return flat{int64T, len(b), bytesOf(unsafe.Pointer(unsafe.SliceData(b)), len(b)*8)}, nil
	}
	return flat{}, fmt.Errorf("%w: %T (want []float32, []float64, []int32 or []int64)", ErrUnsupportedType, buf)
}

func bytesOf(p unsafe.Pointer, n int) []byte {
	if n == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(p), n)
}

func f32(b []byte) []float32 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

func f64(b []byte) []float64 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*float64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8)
}

func i32(b []byte) []int32 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

func i64(b []byte) []int64 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*int64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8)
}

// reducer returns dst = dst ⊕ src for op on dt. Avg reduces as Sum; the
// division happens once, on the final value (see finish).
func reducer(dt dtype, op ReduceOp) transport.ReduceFunc {
	if op == Avg {
		op = Sum
	}
	switch dt {
	case float32T:
		switch op {
		case Sum:
			return func(d, s []byte) { kernels.Add(f32(d), f32(s)) }
		case Prod:
			return func(d, s []byte) { kernels.Mul(f32(d), f32(s)) }
		case Min:
			return func(d, s []byte) { kernels.Min(f32(d), f32(s)) }
		case Max:
			return func(d, s []byte) { kernels.Max(f32(d), f32(s)) }
		}
	case float64T:
		switch op {
		case Sum:
			return func(d, s []byte) { kernels.Add64(f64(d), f64(s)) }
		case Prod:
			return func(d, s []byte) { kernels.Mul64(f64(d), f64(s)) }
		case Min:
			return func(d, s []byte) { kernels.Min64(f64(d), f64(s)) }
		case Max:
			return func(d, s []byte) { kernels.Max64(f64(d), f64(s)) }
		}
	case int32T:
		return func(d, s []byte) { reduceInts(i32(d), i32(s), op) }
	case int64T:
		return func(d, s []byte) { reduceInts(i64(d), i64(s), op) }
	}
	panic(fmt.Sprintf("distributed: no reducer for %v %v", dt, op))
}

func reduceInts[T int32 | int64](d, s []T, op ReduceOp) {
	d = d[:len(s)]
	switch op {
	case Sum:
		for i, v := range s {
			d[i] += v
		}
	case Prod:
		for i, v := range s {
			d[i] *= v
		}
	case Min:
		for i, v := range s {
			d[i] = min(d[i], v)
		}
	case Max:
		for i, v := range s {
			d[i] = max(d[i], v)
		}
	}
}

// finish applies Avg's division by n to a fully reduced range: floats are
// multiplied by 1/n (one vectorized pass), integers divided by n with
// truncation toward zero, like Go and C.
func finish(dt dtype, op ReduceOp, b []byte, n int) {
	if op != Avg || n == 1 {
		return
	}
	switch dt {
	case float32T:
		kernels.Scale(1/float32(n), f32(b))
	case float64T:
		x := f64(b)
		inv := 1 / float64(n)
		for i := range x {
			x[i] *= inv
		}
	case int32T:
		x := i32(b)
		for i := range x {
			x[i] /= int32(n)
		}
	case int64T:
		x := i64(b)
		for i := range x {
			x[i] /= int64(n)
		}
	}
}
