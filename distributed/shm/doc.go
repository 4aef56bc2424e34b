// Package shm is gotrain's shared memory between ranks on one host: the
// /dev/shm files they map, the per-pair ring of slots the TCP transport
// uses for large payloads, and the arena through which distributed's
// allreduce runs when every rank of a group shares the host. It owns the
// memory layouts, the counters and control words in them, and the waits on
// them (spinning, then a futex); the algorithms that drive them live with
// their callers (distributed/internal/transport/tcp, distributed/allreduce_shm.go).
//
// Which path a message takes:
//
//   - An allreduce of a group whose ranks all run on this host goes
//     through the group's Arena: no socket, no frame header, no system
//     call unless a rank sleeps. The group's TCP mesh stays connected
//     beside it, to detect a dead peer and to carry every other collective.
//   - Any other frame between two ranks on the same host (same IP address
//     at both ends of the connection) whose payload is at least
//     RingMinPayload (32 KiB) and at most SlotSize (1 MiB) is copied into
//     a slot of the pair's Ring; only its header, flagged
//     transport.FlagShm with the slot's index, travels on the TCP
//     connection, which keeps ordering, mismatch detection and failure
//     handling.
//   - Everything else (smaller or larger payloads, peers on other hosts)
//     goes over TCP.
//
// GOTRAIN_SHM=0 turns shared memory off: every message then goes over TCP
// (Enabled, the one place the variable is read). Shared memory is used on
// Linux only (tmpfs /dev/shm, fallocate, futex); on other systems Enabled
// reports false and Create fails, so everything goes over TCP.
//
// A file is reserved whole when it is created: a write to a page that a
// full /dev/shm cannot back would kill the process with SIGBUS (Docker's
// default /dev/shm is 64 MiB), while a failed reservation is an error the
// caller falls back from (to TCP). Need is what a group reserves: a ring
// per pair of same-host ranks (16 MiB each, so it grows with the square of
// the local ranks: 16 ranks take 2 GB) plus the arena; gotrain's CLI
// compares it with Free before it starts workers.
//
// A file is unlinked as soon as every peer has mapped it, so normally
// nothing outlives a job. A process killed in between (SIGKILL, the OOM
// killer) leaves its file; the name says which job and process made it
// (see FilePattern), and RemoveStale removes the files whose creator is
// gone: the launcher calls it when a job starts and ends, and a process's
// first Create does too.
package shm
