// Package rendezvous is the membership of an elastic job (torchrun
// --nnodes MIN:MAX --rdzv-endpoint): nodes meet in rounds, each round a
// group of MIN to MAX nodes with dense node ranks, and a node's loss or
// arrival ends the round so that the live nodes re-form a group of the
// new size.
//
// A round closes when MaxNodes nodes are in, or when it has had
// MinNodes for LastCall. While its workers run, every node watches: a
// member whose heartbeat lapses (DeadAfter) ends the round as a failure,
// which counts against the job's restarts, and a node waiting to join
// while the group is below MaxNodes ends it as an arrival, which does
// not. A node that arrives while the group is full waits as a spare.
// Closing a round keeps the last round's members in their node ranks,
// so node rank 0 stays on its node while that node lives.
//
// The state is one record in a Backend that outlives any worker: a
// gotrain TCP store (StoreEndpoint, torchrun's c10d backend, served by
// the launcher of the node whose address the endpoint is), or etcd
// (package etcd), with which no gotrain process is a single point of
// failure. Every change is a compare-and-swap of the whole record, and
// the decisions are pure functions of it (state.go), driven by the
// Rendezvous's loops (rendezvous.go); MemBackend runs them in tests.
// Package launch runs the workers of each round.
package rendezvous
