package distributed

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gotrain/gotrain/distributed/store"
	"github.com/gotrain/gotrain/internal/shmfile"
)

// When every rank of a group runs on one host, allreduce goes through a
// shared-memory arena instead of the socket mesh: each rank copies its
// data into its own region of one /dev/shm file that all ranks map, each
// rank reduces its share of every chunk straight out of the others'
// regions, and the ranks signal each other by bumping a counter in shared
// memory and spinning on the others' counters. No system call, no thread
// wake-up and no frame header is on that path, which is what dominates a
// few-megabyte gradient allreduce on a machine whose cores are all busy
// training (issue 4: 40 context switches per step over TCP headers).
//
// The mesh stays connected beside the arena: it still carries every other
// collective, detects a dead peer (EOF) and a mismatched operation (a
// frame of another operation arriving while this rank runs an arena
// allreduce), and the arena's waits give up as soon as the mesh fails.
const (
	// arenaChunk is the largest piece of an allreduce done in one round
	// (fewer rounds, fewer waits); each rank's region holds two, so a round
	// can start while peers still read the previous one. With many ranks
	// the chunk shrinks (see chunkFor) to bound the file, all of which is
	// reserved up front.
	arenaChunk = 4 << 20
	// arenaBudget bounds the data areas of all ranks together.
	arenaBudget = 64 << 20
	// arenaMinChunk is the smallest chunk, for the most ranks.
	arenaMinChunk = 256 << 10
	// arenaCtl is each rank's control block: its round counter and the
	// description of the operation it runs, on their own cache lines.
	arenaCtl = 256
	// arenaMaxRanks bounds the file (two 512 KiB chunks per rank at 64
	// ranks).
	arenaMaxRanks = 64
	// arenaNonceLen bytes at the start of the file hold the creator's
	// random nonce, which proves to the other ranks that they mapped the
	// very file it created.
	arenaNonceLen = 16
	arenaHeader   = 4096
)

// arena is one rank's view of the group's shared-memory file.
type arena struct {
	mem     []byte
	rank    int
	size    int
	chunk   int             // bytes per round: chunkFor(size)
	ctl     []*arenaControl // each rank's control block
	data    [][2][]byte     // data[r][i]: rank r's area for rounds ≡ i mod 2
	round   uint64          // this rank's completed phases (2 per round)
	spin    time.Duration   // how long a wait spins before it sleeps now
	maxSpin time.Duration
	closed  atomic.Bool
}

// arenaControl is a rank's control block in shared memory. Phase is
// written last (atomically) and read first, so a peer that sees a phase
// also sees the descriptor written before it.
type arenaControl struct {
	phase    uint64
	sleepers uint64 // peers asleep on phase (a futex word)
	_        [48]byte
	seq      uint64
	desc     uint64 // op kind, dtype and reduce op
	count    uint64
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

// begin publishes the collective this rank starts.
func (a *arena) begin(seq, desc, count uint64) {
	c := a.ctl[a.rank]
	c.curDesc, c.curCount = desc, count
	atomic.StoreUint64(&c.cur, seq+1)
}

// opDescWord packs an operation's kind, dtype and reduce op.
func opDescWord(op, dt, red uint8) uint64 {
	return uint64(op) | uint64(dt)<<8 | uint64(red)<<16
}

// chunkFor is the chunk for n ranks: arenaChunk, or less so that the data
// areas fit arenaBudget, in whole 64 KiB.
func chunkFor(n int) int {
	return max(arenaMinChunk, min(arenaChunk, arenaBudget/(2*n)&^(64<<10-1)))
}

func arenaFileSize(n int) int { return arenaHeader + n*(arenaCtl+2*chunkFor(n)) }

// setupArena agrees with every rank of the group on a shared-memory
// arena. Rank 0 creates the file and publishes its path and nonce in the
// store; each rank maps it and reports whether it could; the arena is used
// only if all could (ranks on other hosts cannot), so every rank takes the
// same allreduce path. It returns nil, nil when the arena is not used.
func setupArena(ctx context.Context, st store.Store, rank, size int, log *slog.Logger) (*arena, error) {
	if size < 2 || size > arenaMaxRanks {
		return nil, nil
	}
	var mem []byte
	var path string
	var nonce [arenaNonceLen]byte
	if rank == 0 {
		if shmfile.Enabled() {
			var err error
			if path, mem, err = createArena(size, &nonce); err != nil {
				log.Warn("dist: no shared-memory arena; allreduce goes over the sockets (slower)", "err", err)
			}
		}
		defer func() {
			if path != "" {
				os.Remove(path) // every rank has mapped it or given up
			}
		}()
		offer := ""
		if mem != nil {
			offer = path + "\n" + hex.EncodeToString(nonce[:])
		}
		if err := st.Set(ctx, "arena/offer", []byte(offer)); err != nil {
			shmfile.Unmap(mem)
			return nil, fmt.Errorf("publish the shared-memory arena: %w", err)
		}
	} else {
		offer, err := st.Get(ctx, "arena/offer")
		if err != nil {
			return nil, fmt.Errorf("read the shared-memory arena offer: %w", err)
		}
		if p, n, ok := bytes.Cut(offer, []byte("\n")); ok && shmfile.Enabled() {
			mem = openArena(string(p), size, string(n))
		}
	}
	ok := "0"
	if mem != nil {
		ok = "1"
	}
	if err := st.Set(ctx, "arena/ok/"+strconv.Itoa(rank), []byte(ok)); err != nil {
		shmfile.Unmap(mem)
		return nil, fmt.Errorf("report the shared-memory arena: %w", err)
	}
	all := true
	for r := 0; r < size; r++ {
		v, err := st.Get(ctx, "arena/ok/"+strconv.Itoa(r))
		if err != nil {
			shmfile.Unmap(mem)
			return nil, fmt.Errorf("agree on the shared-memory arena: %w", err)
		}
		all = all && string(v) == "1"
	}
	if !all {
		shmfile.Unmap(mem)
		return nil, nil
	}
	return newArena(mem, rank, size), nil
}

// createFile is shmfile.Create, replaceable by tests.
var createFile = shmfile.Create

func createArena(size int, nonce *[arenaNonceLen]byte) (string, []byte, error) {
	if _, err := rand.Read(nonce[:]); err != nil {
		return "", nil, err
	}
	path, mem, err := createFile("gotrain-arena-*", arenaFileSize(size))
	if err != nil {
		return "", nil, err
	}
	copy(mem, nonce[:])
	return path, mem, nil
}

// openArena maps the file at path if it is the one rank 0 created (its
// nonce matches): a rank on another host, or in another /dev/shm, gets nil.
func openArena(path string, size int, nonceHex string) []byte {
	nonce, err := hex.DecodeString(nonceHex)
	if err != nil || len(nonce) != arenaNonceLen {
		return nil
	}
	mem, err := shmfile.Open(path, arenaFileSize(size))
	if err != nil {
		return nil
	}
	if !bytes.Equal(mem[:arenaNonceLen], nonce) {
		shmfile.Unmap(mem)
		return nil
	}
	return mem
}

func newArena(mem []byte, rank, size int) *arena {
	chunk := chunkFor(size)
	a := &arena{mem: mem, rank: rank, size: size, chunk: chunk}
	regions := mem[arenaHeader:]
	for r := 0; r < size; r++ {
		reg := regions[r*(arenaCtl+2*chunk):]
		a.ctl = append(a.ctl, (*arenaControl)(unsafe.Pointer(&reg[0])))
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

// minSpin is the least a wait spins: a futex round trip's worth.
const minSpin = 20 * time.Microsecond

// adaptSpin updates the spin budget after a wait that took waited. A wait
// shorter than the longest spin would have been cheaper spun through in
// full (a sleep costs a wake-up, and on a virtual machine the halted CPU's),
// so the budget goes back to the longest; a longer wait means the peer was
// busy or not running at all, and spinning only kept it from the CPU, so
// the budget halves. Like an adaptive mutex.
func (a *arena) adaptSpin(waited time.Duration) {
	if waited < a.maxSpin {
		a.spin = a.maxSpin
	} else {
		a.spin = max(a.spin/2, minSpin)
	}
}

// close unmaps the arena. The caller guarantees no operation is running.
func (a *arena) close() {
	if a == nil {
		return
	}
	a.closed.Store(true)
	shmfile.Unmap(a.mem)
	a.mem = nil
}
