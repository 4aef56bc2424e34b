package shm

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"
)

// When every rank of a group runs on one host, allreduce goes through a
// shared-memory arena instead of the socket mesh: each rank copies its
// data into its own region of one /dev/shm file that all ranks map, each
// rank reduces its share of every chunk straight out of the others'
// regions, and the ranks signal each other by bumping a counter in shared
// memory and spinning on the others' counters. No system call, no thread
// wake-up and no frame header is on that path, which is what dominates a
// few-megabyte gradient allreduce on a machine whose cores are all busy
// training (40 context switches per step over TCP headers).
//
// The mesh stays connected beside the arena: it still carries every other
// collective, detects a dead peer (EOF) and a mismatched operation (a
// frame of another operation arriving while this rank runs an arena
// allreduce), and the arena's waits give up as soon as the mesh fails.
//
// The file's layout:
//
//	[0, arenaNonceLen)   the creator's random nonce
//	[arenaHeader, ...)   per rank r, in rank order, a region of
//	                     arenaCtl bytes of control block (control)
//	                     2 data areas of chunkFor(size) bytes each
const (
	// ArenaChunk is the largest piece of an allreduce done in one round
	// (fewer rounds, fewer waits); each rank's region holds two, so a round
	// can start while peers still read the previous one. With many ranks
	// the chunk shrinks, to bound the file, all of which is reserved up
	// front.
	ArenaChunk = 4 << 20
	// arenaBudget bounds the data areas of all ranks together.
	arenaBudget = 64 << 20
	// arenaMinChunk is the smallest chunk, for the most ranks.
	arenaMinChunk = 256 << 10
	// arenaCtl is each rank's control block: its round counter and the
	// description of the operation it runs, on their own cache lines.
	arenaCtl = 256
	// ArenaMaxRanks bounds the file (two 512 KiB chunks per rank at 64
	// ranks); larger groups do not use an arena.
	ArenaMaxRanks = 64
	// arenaNonceLen bytes at the start of the file hold the creator's
	// random nonce, which proves to the other ranks that they mapped the
	// very file it created.
	arenaNonceLen = 16
	arenaHeader   = 4096
)

// Op identifies a collective in an arena's control words: its sequence
// number in the group, a description word packing its kind, dtype and
// reduce op (the caller's encoding), and its element count.
type Op struct {
	Seq, Desc, Count uint64
}

// Arena is one rank's view of the group's shared-memory file. The
// allreduce that drives it runs on one goroutine at a time; Interrupt may
// be called from any.
type Arena struct {
	mem     []byte
	rank    int
	size    int
	chunk   int        // bytes per round: chunkFor(size)
	ctl     []*control // each rank's control block
	data    [][2][]byte
	round   uint64        // this rank's completed phases (2 per round)
	spin    time.Duration // how long a wait spins before it sleeps now
	maxSpin time.Duration
	closed  atomic.Bool
}

// control is a rank's control block in shared memory. Phase is written
// last (atomically) and read first, so a peer that sees a phase also sees
// the descriptor written before it.
type control struct {
	phase    uint64
	sleepers uint64 // peers asleep on phase (a futex word)
	_        [48]byte
	op       Op // the allreduce whose round this rank runs
	_        [40]byte
	// cur is 1 + the sequence number of the collective this rank runs,
	// of any kind, published when it begins (0: none yet). A rank waiting
	// in the arena compares it with its own operation, which catches a
	// peer that runs another collective sending this rank nothing (a
	// broadcast it receives, say) instead of waiting out the timeout.
	cur      uint64
	curDesc  uint64
	curCount uint64
}

// chunkFor is the chunk for n ranks: ArenaChunk, or less so that the data
// areas fit arenaBudget, in whole 64 KiB.
func chunkFor(n int) int {
	return max(arenaMinChunk, min(ArenaChunk, arenaBudget/(2*n)&^(64<<10-1)))
}

func arenaFileSize(n int) int { return arenaHeader + n*(arenaCtl+2*chunkFor(n)) }

// CreateArena creates and maps the arena file for size ranks and writes
// a fresh random nonce at its start, which it returns hex-encoded for the
// other ranks' OpenArena. The caller removes the file once every rank has
// mapped it or given up.
func CreateArena(size int) (path, nonce string, mem []byte, err error) {
	var n [arenaNonceLen]byte
	if _, err := rand.Read(n[:]); err != nil {
		return "", "", nil, err
	}
	path, mem, err = Create("arena", arenaFileSize(size))
	if err != nil {
		return "", "", nil, err
	}
	copy(mem, n[:])
	return path, hex.EncodeToString(n[:]), mem, nil
}

// OpenArena maps the arena file for size ranks at path if it is the one
// CreateArena made (its nonce matches): a rank on another host, or in
// another /dev/shm, gets nil.
func OpenArena(path string, size int, nonce string) []byte {
	n, err := hex.DecodeString(nonce)
	if err != nil || len(n) != arenaNonceLen {
		return nil
	}
	mem, err := Open(path, arenaFileSize(size))
	if err != nil {
		return nil
	}
	if !bytes.Equal(mem[:arenaNonceLen], n) {
		Unmap(mem)
		return nil
	}
	return mem
}

// NewArena lays rank's view of a group of size ranks over mem, a mapping
// from CreateArena or OpenArena.
func NewArena(mem []byte, rank, size int) *Arena {
	chunk := chunkFor(size)
	a := &Arena{mem: mem, rank: rank, size: size, chunk: chunk}
	regions := mem[arenaHeader:]
	for r := 0; r < size; r++ {
		reg := regions[r*(arenaCtl+2*chunk):]
		a.ctl = append(a.ctl, (*control)(unsafe.Pointer(&reg[0])))
		d := reg[arenaCtl:]
		a.data = append(a.data, [2][]byte{
			d[:chunk:chunk],
			d[chunk : 2*chunk : 2*chunk],
		})
	}
	// Spinning is how a waiting rank notices its peers within a
	// microsecond. Sleeping costs far more than the futex calls: an idle
	// CPU halts, and on a virtual machine waking a halted vCPU can take
	// milliseconds. But a spinning rank steals the CPU of any other
	// process that wants it — possibly the peer it waits for, when ranks
	// outnumber CPUs or other work shares the machine. So the spin budget
	// adapts (see adaptSpin): long while waits end during the spin, short
	// once they do not.
	a.maxSpin = 2 * time.Millisecond
	if size > runtime.NumCPU() {
		a.maxSpin = 20 * time.Microsecond
	}
	a.spin = a.maxSpin
	return a
}

// Rank is this rank's index in the group.
func (a *Arena) Rank() int { return a.rank }

// Size is the number of ranks sharing the arena.
func (a *Arena) Size() int { return a.size }

// Chunk is the most bytes one round reduces.
func (a *Arena) Chunk() int { return a.chunk }

// Area is the data area (0 or 1) of the round about to start. Rounds
// alternate between the two, so that a round can start while slow peers
// still read the previous one.
func (a *Arena) Area() int { return int((a.round / 2) % 2) }

// Data is rank r's data area of the given index: Chunk() bytes
// that r writes and every rank reads.
func (a *Arena) Data(r, area int) []byte { return a.data[r][area] }

// Begin publishes the collective this rank starts, of any kind, before it
// runs, so that a peer waiting for this rank in the arena can tell that it
// runs another one (PeerRunsOther) instead of waiting out its timeout.
func (a *Arena) Begin(op Op) {
	c := a.ctl[a.rank]
	c.curDesc, c.curCount = op.Desc, op.Count
	atomic.StoreUint64(&c.cur, op.Seq+1)
}

// SetRound describes the allreduce whose round this rank runs; peers read
// it (RoundOp) once they see the phase published after it.
func (a *Arena) SetRound(op Op) { a.ctl[a.rank].op = op }

// RoundOp is rank r's description of the allreduce whose round it runs,
// valid once this rank has waited for r's phase (PublishAndWait).
func (a *Arena) RoundOp(r int) Op { return a.ctl[r].op }

// PeerRunsOther reports whether peer r, which has not yet reached phase
// want, has begun another collective than op: a later one, or op's with
// another description. It returns the collective r runs. The peer writes
// its phase before it begins a later operation, so reading the phase after
// its current operation tells a peer that has legitimately moved on (phase
// reached) from a mismatch.
func (a *Arena) PeerRunsOther(r int, want uint64, op Op) (Op, bool) {
	p := a.ctl[r]
	cur := atomic.LoadUint64(&p.cur)
	desc, count := p.curDesc, p.curCount
	if atomic.LoadUint64(&p.phase) < want && (cur > op.Seq+1 ||
		cur == op.Seq+1 && (desc != op.Desc || count != op.Count)) {
		return Op{Seq: cur - 1, Desc: desc, Count: count}, true
	}
	return Op{}, false
}

// PublishAndWait ends this rank's current phase and waits until every
// rank has ended it too. It spins for up to the adaptive budget (a peer is
// usually microseconds away), then sleeps on the peer's phase word, a
// futex the peer wakes when it publishes. While it waits for peer r to
// reach phase want it asks stop(r, want), every few hundred polls, whether
// to give up, and returns stop's error if so.
func (a *Arena) PublishAndWait(stop func(r int, want uint64) error) error {
	a.round++
	want := a.round
	me := a.ctl[a.rank]
	atomic.StoreUint64(&me.phase, want)
	if atomic.LoadUint64(&me.sleepers) != 0 {
		futexWakeAll(&me.phase)
	}
	spins := 0
	var start time.Time
	for r := 0; r < a.size; r++ {
		p := a.ctl[r]
		for atomic.LoadUint64(&p.phase) < want {
			spins++
			if spins&255 != 0 {
				if spins&63 == 0 {
					runtime.Gosched()
				}
				continue
			}
			if start.IsZero() {
				start = time.Now()
			}
			if err := stop(r, want); err != nil {
				if atomic.LoadUint64(&p.phase) >= want {
					// r reached the phase after the load above, and then
					// left or failed: what this wait needed is there.
					continue
				}
				return err
			}
			if time.Since(start) < a.spin {
				continue
			}
			// Announce the sleep, then re-check: the peer either sees
			// the announcement after its store (and wakes us) or its
			// store is seen here. The timeout re-checks errors.
			atomic.AddUint64(&p.sleepers, 1)
			if v := atomic.LoadUint64(&p.phase); v < want {
				futexSleep(&p.phase, uint32(v), 5*time.Millisecond)
			}
			atomic.AddUint64(&p.sleepers, ^uint64(0))
		}
	}
	if !start.IsZero() {
		a.adaptSpin(time.Since(start))
	}
	return nil
}

// Lagging appends to dst the ranks that have not yet reached the phase
// this rank last published, that is, the peers its current wait waits
// for. It reads only the shared counters, so any goroutine may call it.
func (a *Arena) Lagging(dst []int) []int {
	mine := atomic.LoadUint64(&a.ctl[a.rank].phase)
	for r, c := range a.ctl {
		if r != a.rank && atomic.LoadUint64(&c.phase) < mine {
			dst = append(dst, r)
		}
	}
	return dst
}

// minSpin is the least a wait spins: a futex round trip's worth.
const minSpin = 20 * time.Microsecond

// adaptSpin updates the spin budget after a wait that took waited. A wait
// shorter than the longest spin would have been cheaper spun through in
// full (a sleep costs a wake-up, and on a virtual machine the halted CPU's),
// so the budget goes back to the longest; a longer wait means the peer was
// busy or not running at all, and spinning only kept it from the CPU, so
// the budget halves. Like an adaptive mutex.
func (a *Arena) adaptSpin(waited time.Duration) {
	if waited < a.maxSpin {
		a.spin = a.maxSpin
	} else {
		a.spin = max(a.spin/2, minSpin)
	}
}

// Interrupt marks the arena closing: a rank waiting on a peer sees
// Interrupted and gives up. Safe to call from any goroutine.
func (a *Arena) Interrupt() { a.closed.Store(true) }

// Interrupted reports whether Interrupt or Close was called.
func (a *Arena) Interrupted() bool { return a.closed.Load() }

// Close unmaps the arena; nil is a no-op. The caller guarantees no
// operation is running.
func (a *Arena) Close() {
	if a == nil {
		return
	}
	a.closed.Store(true)
	Unmap(a.mem)
	a.mem = nil
}
