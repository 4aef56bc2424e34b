package distributed

import "fmt"

// ReduceOp combines values element-wise across ranks.
type ReduceOp int

// Reduce operations. Avg on floats multiplies the sum by 1/n; on integers
// it divides the sum by n, truncating toward zero (Go's and C's integer
// division; PyTorch's gloo backend has no Avg at all).
const (
	Sum ReduceOp = iota
	Avg
	Min
	Max
	Prod
)

// String names the op.
func (op ReduceOp) String() string {
	switch op {
	case Sum:
		return "sum"
	case Avg:
		return "avg"
	case Min:
		return "min"
	case Max:
		return "max"
	case Prod:
		return "prod"
	}
	return fmt.Sprintf("ReduceOp(%d)", int(op))
}

func (op ReduceOp) valid() bool { return op >= Sum && op <= Prod }

// opKind names an operation in frame headers and errors.
type opKind uint8

const (
	opAllReduce opKind = iota + 1
	opBroadcast
	opReduce
	opAllGather
	opGather
	opScatter
	opReduceScatter
	opAllToAll
	opBarrier
	opSend
	opRecv
)

func (k opKind) String() string {
	switch k {
	case opAllReduce:
		return "allreduce"
	case opBroadcast:
		return "broadcast"
	case opReduce:
		return "reduce"
	case opAllGather:
		return "allgather"
	case opGather:
		return "gather"
	case opScatter:
		return "scatter"
	case opReduceScatter:
		return "reduce_scatter"
	case opAllToAll:
		return "alltoall"
	case opBarrier:
		return "barrier"
	case opSend:
		return "send"
	case opRecv:
		return "recv"
	}
	return fmt.Sprintf("op(%d)", uint8(k))
}
