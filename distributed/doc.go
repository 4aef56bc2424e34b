// Package distributed is gotrain's torch.distributed: process groups whose ranks
// run collectives (AllReduce, Broadcast, Reduce, AllGather, Gather,
// Scatter, ReduceScatter, AllToAll, Barrier) and point-to-point messages
// (Send, Recv with tags) on flat []float32, []float64, []int32 and []int64
// buffers, each blocking or asynchronous (a *Work to Wait on).
//
// Init joins a group the way torch.distributed.init_process_group does:
// env:// (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, as torchrun, a
// Kubernetes PyTorchJob or `gotrain run` set them), tcp://host:port or
// file:///path; with env:// and none of a launcher's variables set, a
// program started by hand is a world of one (rank 0 of 1, an in-memory
// store) and logs so. Ranks meet through a store (package distributed/store),
// then connect a full TCP mesh (distributed/internal/transport/tcp) in which every
// connection is authenticated (distributed/internal/auth) with the job's token; with
// Config.TLSCA, TLSCert and TLSKey (GOTRAIN_TLS_CA, GOTRAIN_TLS_CERT,
// GOTRAIN_TLS_KEY) the store and every mesh connection also run inside
// mutual TLS 1.3 (package distributed/tlsconf).
//
// Every rank runs the same build. During the rendezvous each rank
// publishes its build identity (gotrain's module version,
// auth.ProtocolVersion, the sha256 of its executable, hashed once per
// process, with its platform and host), and a rank whose build differs
// from rank 0's fails every rank at once with an error naming both ranks,
// their hosts and both hashes, however the ranks were started.
// Config.AllowMixedBuilds (GOTRAIN_ALLOW_MIXED_BUILDS=1) allows mixed
// builds, such as amd64 and arm64 nodes, and logs them instead.
//
// Programs that prefer torch's short name may import it as dist:
//
//	import dist "github.com/gotrain/gotrain/distributed"
//
// (the directory is not named dist because release tooling writes and
// cleans ./dist).
//
// The contracts:
//
//   - No silent hang. A peer that dies (EOF, reset) or destroys the group
//     (a goodbye, also when its loop unwinds through a deferred Destroy)
//     fails every pending and later operation on every rank at once, with
//     an error naming that rank and its address; a peer that falls silent
//     (frozen, stopped, cut off: idle connections carry heartbeats) fails
//     them within Config.HeartbeatTimeout (15 s); a live but stuck peer
//     fails the operation at Config.Timeout (5 min), and meanwhile a rank
//     waiting over 30 s logs which peers it waits for. Errors are *OpError values naming this rank, the
//     operation, its sequence number, type and count, and wrapping a
//     sentinel: ErrPeerLost, ErrTimeout, ErrMismatch, ErrGroupClosed.
//   - Mismatches are caught. Every frame carries its operation's identity
//     (op, type, count, reduce op, root, sequence number); a rank that
//     receives a frame of another operation than the one it runs fails
//     with ErrMismatch and tells every peer, so all ranks report it. No
//     extra message is needed.
//   - After any such failure the group is unusable; Destroy it.
//
// Algorithms (docs/algorithms.md gives their steps and bytes on the wire)
// take flat byte buffers and a reduce function and know nothing of the
// network; the transport knows nothing of algorithms. AllReduce uses the
// shared-memory arena when every rank shares this host; when the ranks
// span several nodes with several ranks on some node, a hierarchical
// allreduce (reduce inside each node, allreduce among one leader per
// node, broadcast inside each node; Broadcast, AllGather and
// ReduceScatter likewise); otherwise recursive doubling for small buffers
// and a segmented, pipelined ring for large ones (Config.AllReduceAlgo or
// GOTRAIN_ALLREDUCE_ALGO override the choice). Same-host traffic goes through shared memory:
// package distributed/shm says which path each message takes.
package distributed
