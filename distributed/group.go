package distributed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gotrain/gotrain/distributed/internal/transport"
	"github.com/gotrain/gotrain/distributed/shm"
	"github.com/gotrain/gotrain/distributed/store"
)

// Group is a process group: the ranks that run collectives together. Its
// collectives are executed one at a time, in the order they are issued:
// queued for the group's goroutine by the async variants (which return a
// *Work at once), or run by the calling goroutine itself when a blocking
// call finds the group idle. Every rank must issue the same collectives
// in the same order (which is checked: see ErrMismatch).
//
// A Group is safe for concurrent use, but operations issued concurrently
// from several goroutines run in an unspecified order, which is only
// correct if every rank happens to pick the same one.
type Group struct {
	rank, size int
	cfg        Config
	id         string // "" for the default group
	mesh       transport.Mesh
	st         store.Store // namespaced for this group
	owner      *storeOwner // set on the default group only
	parent     *Group

	mu       sync.Mutex // mu guards queue, running, closed, nextSeq, children, nsub
	queue    []*Work
	running  bool // an operation is executing (on the worker or inline)
	closed   bool
	nextSeq  uint64
	children []*Group
	nsub     int
	p2p      sync.WaitGroup // running point-to-point operations

	scratch []byte     // the worker's reusable scratch buffer
	ranAlgo string     // the algorithm of the last allreduce that moved data (tests read it)
	arena   *shm.Arena // shared-memory allreduce when all ranks share a host; nil otherwise
	topo    *topology  // the ranks of each node (topology.go)

	wake       chan struct{} // capacity 1: "queue changed"
	workerDone chan struct{}

	// The running operation, for the watchdog (see watch): when it
	// started (unix nanoseconds, 0 when none runs) and what it is.
	opStart   atomic.Int64
	opRunning atomic.Pointer[opDesc]
	watchStop chan struct{}
	watchDone chan struct{}

	flight     flightRecorder // the last operations, for dumps (flight.go)
	stopSignal func()         // ends the dump-on-SIGUSR1 watch; nil if none
	sent       []atomic.Int64 // payload bytes sent to each peer (BytesSent)
}

// Rank returns this process's rank in the group.
func (g *Group) Rank() int { return g.rank }

// Size returns the number of ranks in the group.
func (g *Group) Size() int { return g.size }

// SharedMemory reports whether every rank of the group runs on this host
// and allreduce goes through shared memory (see GOTRAIN_SHM). Such ranks
// share this host's CPUs, which is what DDP needs to know to decide
// whether communication can overlap computation.
func (g *Group) SharedMemory() bool { return g.arena != nil }

func newGroup(cfg Config, id string, rank, size int, mesh transport.Mesh, st store.Store) *Group {
	g := &Group{
		rank: rank, size: size, cfg: cfg, id: id, mesh: mesh, st: st,
		wake:       make(chan struct{}, 1),
		workerDone: make(chan struct{}),
		watchStop:  make(chan struct{}),
		watchDone:  make(chan struct{}),
		sent:       make([]atomic.Int64, size),
	}
	go g.worker()
	go g.watch()
	return g
}

// waitLogAfter is how long an operation runs before its rank logs what it
// waits for, and then how often it logs again while the wait goes on.
var waitLogAfter = 30 * time.Second

// watch logs, once per waitLogAfter while an operation has run longer
// than that, which peers it waits for and whether they are alive, so that
// a stuck job says why long before the operation timeout.
func (g *Group) watch() {
	defer close(g.watchDone)
	t := time.NewTicker(waitLogAfter / 6)
	defer t.Stop()
	var logged int64 // opStart of the operation last logged, and when
	var loggedAt time.Time
	for {
		select {
		case <-g.watchStop:
			return
		case now := <-t.C:
			start := g.opStart.Load()
			d := g.opRunning.Load()
			if start == 0 || d == nil || now.Sub(time.Unix(0, start)) < waitLogAfter {
				continue
			}
			if start == logged && now.Sub(loggedAt) < waitLogAfter {
				continue
			}
			logged, loggedAt = start, now
			g.logWait(d, now.Sub(time.Unix(0, start)), now)
		}
	}
}

// logWait logs one report of a long wait for the operation d.
func (g *Group) logWait(d *opDesc, waited time.Duration, now time.Time) {
	var waiting []int
	if g.arena != nil && d.kind == opAllReduce {
		waiting = g.arena.Lagging(nil)
	}
	var peers []string
	for r := 0; r < g.size; r++ {
		if r == g.rank {
			continue
		}
		p := g.mesh.Pair(r)
		if p.Pending() > 0 && !slices.Contains(waiting, r) {
			waiting = append(waiting, r)
		}
		state := fmt.Sprintf("rank %d heard %v ago", r, now.Sub(p.LastHeard()).Round(100*time.Millisecond))
		if err := p.Err(); err != nil {
			state = fmt.Sprintf("rank %d gone: %v", r, err)
		}
		peers = append(peers, state)
	}
	log := g.cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log.Warn("distributed: a collective is still waiting for peers",
		"rank", g.rank, "op", fmt.Sprintf("%s #%d", d.kind, d.seq), "waited", waited.Round(100*time.Millisecond),
		"waiting_for", fmt.Sprint(waiting), "peers", strings.Join(peers, "; "), "timeout", g.cfg.Timeout)
}

// Destroy fails pending operations with ErrGroupClosed, closes every
// connection of the group and of the groups made from it by NewGroup,
// stops the store server if this rank runs it, and waits for every
// goroutine of the group to exit. Peers' pending operations fail with
// ErrPeerLost naming this rank. Calling Destroy again does nothing.
func (g *Group) Destroy() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	children := g.children
	g.children = nil
	g.mu.Unlock()
	for _, c := range children {
		c.Destroy()
	}
	select {
	case g.wake <- struct{}{}:
	default:
	}
	if g.arena != nil {
		g.arena.Interrupt() // a rank spinning on a peer gives up
	}
	if g.stopSignal != nil {
		g.stopSignal()
	}
	err := g.mesh.Close()
	<-g.workerDone
	close(g.watchStop)
	<-g.watchDone
	g.p2p.Wait()
	g.arena.Close()
	if g.owner != nil {
		if cerr := g.owner.leave(); err == nil {
			err = cerr
		}
	}
	return err
}

// Work is the handle of an asynchronous operation.
type Work struct {
	ctx  context.Context // the issuing call's context; bounds the run
	op   opDesc
	run  func(ctx context.Context, c *comm) error
	done chan struct{}
	err  error
}

// Wait blocks until the operation finishes and returns its error, or
// until ctx ends, in which case the operation keeps running and the
// buffers stay in use by the group.
func (w *Work) Wait(ctx context.Context) error {
	select {
	case <-w.done:
		return w.err
	default:
	}
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
		return fmt.Errorf("distributed: wait for %s #%d: %w", w.op.kind, w.op.seq, ctx.Err())
	}
}

// Done is closed when the operation has finished.
func (w *Work) Done() <-chan struct{} { return w.done }

// opDesc identifies an operation in errors and frame headers.
type opDesc struct {
	kind  opKind
	seq   uint64
	dt    dtype
	count int // this rank's buffer element count (the op's identity)
	red   ReduceOp
	root  int // -1 if none
	peer  int // send/recv peer, else -1
	tag   int64
}

func (d *opDesc) detail() string {
	s := ""
	switch d.kind {
	case opAllReduce, opReduce, opReduceScatter:
		s += ", " + d.red.String()
	}
	if d.root >= 0 {
		s += fmt.Sprintf(", root %d", d.root)
	}
	if d.peer >= 0 {
		s += fmt.Sprintf(", peer %d, tag %d", d.peer, d.tag)
	}
	return s
}

// submit queues an operation, or, for a blocking call on an idle group,
// runs it right here: that saves two goroutine hand-offs per operation.
// Sequence numbers are assigned here, so the order of submission is the
// order on the wire.
func (g *Group) submit(ctx context.Context, sync bool, d opDesc, run func(ctx context.Context, c *comm) error) *Work {
	w := &Work{ctx: ctx, op: d, run: run, done: make(chan struct{})}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		w.err = g.opError(&w.op, ErrGroupClosed, ErrGroupClosed)
		close(w.done)
		return w
	}
	w.op.seq = g.nextSeq
	g.nextSeq++
	if sync && !g.running && len(g.queue) == 0 {
		g.running = true
		g.mu.Unlock()
		w.err = g.execute(w)
		close(w.done)
		g.mu.Lock()
		g.running = false
		more := len(g.queue) > 0 || g.closed // the worker may be waiting to exit
		g.mu.Unlock()
		if more {
			g.signal()
		}
		return w
	}
	g.queue = append(g.queue, w)
	g.mu.Unlock()
	g.signal()
	return w
}

func (g *Group) signal() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// failed returns a finished Work carrying err (argument errors).
func failed(err error) *Work {
	w := &Work{err: err, done: make(chan struct{})}
	close(w.done)
	return w
}

// worker runs queued operations in order until the group is destroyed
// and the queue drained. It leaves the group alone while a blocking call
// runs an operation inline.
func (g *Group) worker() {
	defer close(g.workerDone)
	for {
		g.mu.Lock()
		if len(g.queue) == 0 || g.running {
			done := g.closed && len(g.queue) == 0 && !g.running
			g.mu.Unlock()
			if done {
				return
			}
			<-g.wake
			continue
		}
		w := g.queue[0]
		g.queue[0] = nil
		g.queue = g.queue[1:]
		closed := g.closed
		g.running = true
		g.mu.Unlock()
		if closed {
			w.err = g.opError(&w.op, ErrGroupClosed, ErrGroupClosed)
		} else {
			w.err = g.execute(w)
		}
		close(w.done)
		g.mu.Lock()
		g.running = false
		g.mu.Unlock()
	}
}

// execute runs one operation with its timeout. On failure the group is
// poisoned: the stream of frames is out of step, so every peer is told
// and every later operation fails.
func (g *Group) execute(w *Work) error {
	if err := g.mesh.Err(); err != nil {
		s, _ := classify(err)
		return g.opError(&w.op, s, fmt.Errorf("the group failed earlier: %w", err))
	}
	if err := w.ctx.Err(); err != nil {
		return g.opError(&w.op, nil, fmt.Errorf("not started: %w", err))
	}
	ctx, cancel := context.WithTimeout(w.ctx, g.cfg.Timeout)
	defer cancel()
	c := &comm{g: g, hdr: transport.Header{
		Kind:  transport.KindCollective,
		Op:    uint8(w.op.kind),
		DType: uint8(w.op.dt),
		RedOp: uint8(w.op.red),
		Root:  int32(w.op.root),
		Seq:   w.op.seq,
		Count: uint64(w.op.count),
	}}
	if w.op.kind == opSend || w.op.kind == opRecv {
		c.hdr = transport.Header{Kind: transport.KindP2P, DType: uint8(w.op.dt), Root: -1, Count: uint64(w.op.count), Tag: w.op.tag}
	} else {
		g.mesh.Begin(c.hdr)
		if g.arena != nil {
			g.arena.Begin(arenaOp(&c.hdr))
		}
	}
	if w.ctx.Done() != nil && (g.arena == nil || w.op.kind != opAllReduce) {
		// A write blocked on a peer that reads nothing heeds only its
		// deadline; on cancellation (SIGTERM) failing the group kicks it,
		// and tells the peers why this rank stops. (An allreduce in the
		// arena writes nothing and checks ctx as it waits: it is spared
		// the cost.)
		stop := context.AfterFunc(w.ctx, func() {
			err := w.ctx.Err()
			if cause := context.Cause(w.ctx); cause != err {
				err = fmt.Errorf("%w (%v)", err, cause)
			}
			g.mesh.Fail(transport.AbortOther, fmt.Errorf("rank %d stopped waiting: %w", g.rank, err))
		})
		defer stop()
	}
	g.opRunning.Store(&w.op)
	g.opStart.Store(time.Now().UnixNano())
	slot := g.flight.begin(&w.op)
	err := w.run(ctx, c)
	g.opStart.Store(0)
	g.flight.end(slot, err)
	if err == nil {
		return nil
	}
	if errors.Is(err, context.DeadlineExceeded) && w.ctx.Err() == nil {
		err = fmt.Errorf("no progress within the %v operation timeout: %w", g.cfg.Timeout, err)
	}
	if cause := g.mesh.Err(); cause != nil && !(w.ctx.Err() != nil && errors.Is(err, context.Canceled)) {
		// The group failed while this operation ran (a peer's abort, a
		// reader's error, this rank's cancellation kicking a blocked
		// write): that is the cause, this error its fallout. A wait that
		// saw the cancellation itself says best what it waited for.
		err = cause
	}
	sentinel, code := classify(err)
	oe := g.opError(&w.op, sentinel, err)
	if d := describeMismatch(err); d != "" {
		oe.Err = fmt.Errorf("%s: %w", d, err)
	}
	g.mesh.Fail(code, oe)
	g.dumpOnFailure(oe)
	// The readers may still own posted buffers: wait until they let go,
	// which the closed connections make quick.
	for _, r := range c.posted {
		<-r.Done()
	}
	return oe
}

func (g *Group) opError(d *opDesc, sentinel, err error) *OpError {
	return &OpError{
		Rank: g.rank, Group: g.id, Op: d.kind.String(), Seq: d.seq,
		DType: d.dt.String(), Count: d.count, Detail: d.detail(),
		Sentinel: sentinel, Err: err,
	}
}

// comm is what an algorithm sees of the group while it runs one
// operation: send to and receive from peers, with the operation's
// identity stamped on every frame.
type comm struct {
	g      *Group
	hdr    transport.Header
	posted []*transport.Recv
	// members, when not nil, narrows the algorithm to these ranks of the
	// group, which it sees as ranks 0..len(members)-1, this one as me
	// (the phases of a hierarchical collective: see within).
	members []int
	me      int
}

func (c *comm) rank() int {
	if c.members != nil {
		return c.me
	}
	return c.g.rank
}

// peer is the group rank of the algorithm's rank r.
func (c *comm) peer(r int) int {
	if c.members != nil {
		return c.members[r]
	}
	return r
}

// scratch returns an n-byte buffer owned by the group's worker, reused
// across operations (only collectives, which the worker runs one at a
// time, may call it).
func (c *comm) scratch(n int) []byte {
	if cap(c.g.scratch) < n {
		c.g.scratch = make([]byte, n)
	}
	return c.g.scratch[:n]
}

// within runs fn with c narrowed to members, ranks of the group that
// fn's algorithm numbers 0..len(members)-1; this rank must be one of them.
// Frames keep the operation's identity, so the phases of one collective
// share its sequence number and mismatch checks.
func (c *comm) within(members []int, fn func(s *comm) error) error {
	s := &comm{g: c.g, hdr: c.hdr, members: members, me: slices.Index(members, c.g.rank)}
	err := fn(s)
	c.posted = append(c.posted, s.posted...)
	return err
}

func (c *comm) size() int {
	if c.members != nil {
		return len(c.members)
	}
	return c.g.size
}

// send writes b to peer as one or more frames of at most maxFrame bytes.
func (c *comm) send(ctx context.Context, peer int, b []byte) error {
	peer = c.peer(peer)
	p := c.g.mesh.Pair(peer)
	c.g.sent[peer].Add(int64(len(b)))
	for off := 0; off < len(b) || off == 0; off += maxFrame {
		if err := p.Send(ctx, c.hdr, b[off:min(off+maxFrame, len(b))]); err != nil {
			return err
		}
	}
	return nil
}

// pending is a posted receive and the peer (a group rank) it expects.
type pending struct {
	r    *transport.Recv
	peer int
}

// post queues receives for b from peer, split into frames exactly as send
// splits it, and returns the last one (frames complete in order). If
// reduce is not nil the payload is reduced into b.
func (c *comm) post(peer int, b []byte, reduce transport.ReduceFunc) pending {
	peer = c.peer(peer)
	p := c.g.mesh.Pair(peer)
	var r *transport.Recv
	for off := 0; off < len(b) || r == nil; off += maxFrame {
		r = transport.NewRecv(c.hdr, b[off:min(off+maxFrame, len(b))], reduce)
		c.posted = append(c.posted, r)
		p.Post(r)
	}
	return pending{r, peer}
}

// wait waits for pd (and, frames being ordered, every receive posted
// before it on the same pair).
func (c *comm) wait(ctx context.Context, pd pending) error {
	select {
	case <-pd.r.Done():
		return pd.r.Err()
	default:
	}
	select {
	case <-pd.r.Done():
		return pd.r.Err()
	case <-ctx.Done():
		p := c.g.mesh.Pair(pd.peer)
		return &transport.PeerError{Rank: pd.peer, Addr: p.Addr(),
			Err: fmt.Errorf("waiting for data: %w", context.Cause(ctx))}
	}
}

// maxFrame is the largest frame the algorithms send.
const maxFrame = 4 << 20
