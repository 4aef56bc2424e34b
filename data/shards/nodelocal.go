package shards

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gotrain/gotrain/data"
)

// ErrShards is wrapped by OpenNodeLocal's errors about what the hosts
// hold: a missing, truncated or corrupt shard, a host with none, a rank
// left with nothing to read, index files that differ between hosts.
var ErrShards = errors.New("shards: node-local data")

// Group is what OpenNodeLocal needs of a process group;
// *distributed.Group implements it.
type Group interface {
	Rank() int
	Size() int
	// AllGather concatenates every rank's src, in rank order, into dst
	// (of Size()·len(src) elements) on every rank.
	AllGather(ctx context.Context, dst, src any) error
}

// Sampler is what a training loop needs of the sampler OpenNodeLocal
// returns (harness.Sampler): a resumable position and the epoch.
type Sampler interface {
	data.ResumableSampler
	SetEpoch(epoch int)
}

// NodeLocalOptions configures OpenNodeLocal. The zero value shuffles with
// seed 0 and checks each shard's presence and size, not its checksum.
type NodeLocalOptions struct {
	// Seed seeds the per-epoch order, as data.Seed.
	Seed uint64
	// NoShuffle visits windows in order instead of a seed+epoch
	// permutation.
	NoShuffle bool
	// Verify has one rank per host compute the sha256 of every shard its
	// host holds, before training, and compare it with index.json: a read
	// of all the data. Without it a shard counts as present when its file
	// has the size index.json implies.
	Verify bool
	// Host names this process's machine in the inventory and in errors;
	// "" means os.Hostname.
	Host string
	// Logger receives rank 0's line about the dealing; nil means
	// slog.Default.
	Logger *slog.Logger
}

// NodeLocal is a rank's share of a split of node-local shards: memory
// mappings, released by Close.
type NodeLocal struct {
	// Windows are the windows of the shards this rank reads (see Close).
	Windows *Windows
	// Sampler orders Windows each epoch: a *data.DistributedSampler when
	// Shared, else a *NodeLocalSampler.
	Sampler Sampler
	// Shared is true when every rank holds every shard.
	Shared bool
	// Files are the shards this rank reads, in index order.
	Files []string
	// EpochWindows is the windows each rank visits per epoch.
	EpochWindows int
	// TotalWindows is the windows of all the split's shards.
	TotalWindows int
	// SkippedWindows is the windows no rank visits in an epoch (0 when
	// Shared, where the DistributedSampler pads instead).
	SkippedWindows int

	tokens *Tokens
}

// OpenNodeLocal opens split of the shards in dir for this rank of g (a
// nil g is a single process) as windows of t tokens, stride apart, on
// machines that may each hold only some of the shards (every one holds
// index.json). Every rank calls it at the same point, with the same
// arguments. Each rank lists the shards its host holds (a file of the
// size index.json gives; with Verify, also its sha256), the ranks
// exchange the lists over g, and each deals the shards alike. A shard no
// host holds, a host holding none, a shard of the wrong size or checksum,
// index files that differ or a rank dealt no window is an error wrapping
// ErrShards, the same one line on every rank, naming the file and the
// hosts. It panics if t or stride is not positive.
//
// What an epoch reads:
//
//   - When every rank holds every shard, it is exactly a shared file
//     system: one window set over all the split's shards, sharded by a
//     data.DistributedSampler (same seed, same order), so a run gives
//     the same result as with the data on one shared disk.
//   - Otherwise each shard is read by exactly one rank, among the ranks
//     whose host holds it: the heaviest shard first, each to the holder
//     with the fewest windows so far (see Assign). The dealing is fixed
//     for the run. Every window of every shard is read at most once per
//     epoch. The ranks of a data-parallel job must take the same number
//     of steps, so every rank's epoch is L windows, L the fewest any rank
//     was dealt; a rank dealt more reads a different L of its windows
//     each epoch (a fresh seed+epoch permutation, or without shuffling
//     the L that follow where the last epoch stopped), so over epochs it
//     reads them all. The windows left out per epoch, the sum over ranks
//     of (dealt − L), are logged by rank 0 at start with their share of
//     the split; the Loader's last partial batch (DropLast) comes on top.
func OpenNodeLocal(ctx context.Context, g Group, dir, split string, t, stride int, opts NodeLocalOptions) (*NodeLocal, error) {
	if t < 1 || stride < 1 {
		panic(fmt.Sprintf("shards: OpenNodeLocal: sequence length %d and stride %d must be positive", t, stride))
	}
	rank, world := 0, 1
	if g != nil {
		rank, world = g.Rank(), g.Size()
	}
	host := opts.Host
	if host == "" {
		var err error
		if host, err = os.Hostname(); err != nil {
			host = fmt.Sprintf("of rank %d", rank)
		}
	}
	// A rank that cannot read the index still takes part in the first
	// exchange, so that every rank stops with it instead of waiting.
	idx, entries, elem, sum, idxErr := readSplit(dir, split)
	n := len(entries)
	if idxErr != nil {
		n = -1
	}
	// First the fixed-size headers (host, index checksum), so that index
	// files that differ are named before the sizes of the lists are.
	heads := make([]int64, world*headerWords)
	if err := gather(ctx, g, heads, encodeHeader(host, n, sum)); err != nil {
		return nil, fmt.Errorf("shards: exchanging the shard inventory: %w", err)
	}
	if idxErr != nil {
		return nil, fmt.Errorf("host %s: %w", host, idxErr)
	}
	hosts, err := decodeHeaders(heads, world, dir)
	if err != nil {
		return nil, err
	}
	local := localInventory(dir, entries, elem)
	if opts.Verify && slices.Index(hosts, host) == rank {
		// The host's first rank reads its shards for all of its ranks.
		if err := verifyLocal(ctx, dir, entries, local); err != nil {
			return nil, err
		}
	}
	words := statusWords(len(entries))
	all := make([]int64, world*words)
	if err := gather(ctx, g, all, encodeStatus(local, words)); err != nil {
		return nil, fmt.Errorf("shards: exchanging the shard inventory: %w", err)
	}
	inv := make([]inventory, world)
	for r := range world {
		inv[r] = inventory{host: hosts[r], status: decodeStatus(all[r*words:(r+1)*words], len(entries))}
	}
	p, err := makePlan(dir, split, entries, inv, t, stride)
	if err != nil {
		return nil, err
	}
	return p.open(dir, split, idx, entries, rank, t, stride, opts)
}

// open builds rank's windows and sampler by p.
func (p *plan) open(dir, split string, idx *Index, entries []Shard, rank, t, stride int, opts NodeLocalOptions) (*NodeLocal, error) {
	world := len(p.windows)
	nl := &NodeLocal{Shared: p.shared, TotalWindows: p.total, SkippedWindows: p.skipped, EpochWindows: p.epochLen}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if p.shared {
		for _, e := range entries {
			nl.Files = append(nl.Files, e.File)
		}
		if err := nl.open(dir, idx, t, stride); err != nil {
			return nil, err
		}
		s := data.NewDistributedSampler(nl.Windows.Len(), world, rank, data.Seed(opts.Seed), data.Shuffle(!opts.NoShuffle))
		nl.Sampler, nl.EpochWindows = s, s.Len()
		if rank == 0 {
			log.Info("shards: every rank holds every shard; sharding one window set across ranks", "dir", dir, "split", split,
				"shards", len(entries), "ranks", world, "windows", nl.Windows.Len())
		}
		return nl, nil
	}
	for _, i := range p.assign[rank] {
		nl.Files = append(nl.Files, entries[i].File)
	}
	if err := nl.open(dir, idx, t, stride); err != nil {
		return nil, err
	}
	if got := nl.Windows.Len(); got != p.windows[rank] {
		nl.Close()
		return nil, fmt.Errorf("%w: rank %d's %d shards in %s give %d windows of %d tokens, stride %d; their sizes in index.json give %d",
			ErrShards, rank, len(nl.Files), dir, got, t, stride, p.windows[rank])
	}
	nl.Sampler = NewNodeLocalSampler(p.windows[rank], p.epochLen, world, opts.Seed, !opts.NoShuffle)
	if rank == 0 {
		log.Info("shards: node-local shards dealt to ranks", "dir", dir, "split", split, "shards", len(entries),
			"ranks", world, "hosts", len(uniqueHosts(p.hosts)), "epoch_windows_per_rank", p.epochLen,
			"skipped_windows_per_epoch", p.skipped, "of_windows", p.total,
			"skipped_percent", fmt.Sprintf("%.2f", 100*float64(p.skipped)/float64(p.total)))
	}
	return nl, nil
}

// open maps nl.Files and makes their windows.
func (nl *NodeLocal) open(dir string, idx *Index, t, stride int) error {
	toks, err := OpenFiles(dir, idx, nl.Files)
	if err != nil {
		return err
	}
	if nl.Windows, err = toks.Windows(t, stride); err != nil {
		toks.Close()
		return err
	}
	nl.tokens = toks
	return nil
}

// Close unmaps the shards; Windows must not be used after it.
func (nl *NodeLocal) Close() error {
	if nl.tokens == nil {
		return nil
	}
	return nl.tokens.Close()
}

// gather is g.AllGather, or a copy for a single process.
func gather(ctx context.Context, g Group, dst, src []int64) error {
	if g == nil {
		copy(dst, src)
		return nil
	}
	return g.AllGather(ctx, dst, src)
}

// readSplit reads dir's index: the split's shards in index order, the
// bytes per token and the sha256 of index.json itself (every host must
// hold the same one).
func readSplit(dir, split string) (idx *Index, entries []Shard, elem int, sum [32]byte, err error) {
	if idx, err = ReadIndex(dir); err != nil {
		return nil, nil, 0, sum, err
	}
	b, err := os.ReadFile(filepath.Join(dir, IndexFile))
	if err != nil {
		return nil, nil, 0, sum, fmt.Errorf("shards: %w", err)
	}
	for _, s := range idx.Shards {
		if s.Split == split {
			entries = append(entries, s)
		}
	}
	if len(entries) == 0 {
		return nil, nil, 0, sum, fmt.Errorf("%w: %s lists no shard of split %q", ErrShards, filepath.Join(dir, IndexFile), split)
	}
	return idx, entries, Width(idx.DType), sha256.Sum256(b), nil
}

// ShardStatus is what a rank found of one shard on its host.
type ShardStatus uint8

const (
	// Absent: no regular file of that name.
	Absent ShardStatus = iota
	// Present: a file of the size index.json implies (and, verified, its
	// checksum).
	Present
	// WrongSize: a file of another size, truncated or not this shard.
	WrongSize
	// BadChecksum: a file whose sha256 differs from index.json's.
	BadChecksum
	// Unreadable: a file that could not be read to compute its sha256.
	Unreadable
)

// localInventory is the status of every entry in dir: present when a
// regular file has tokens×elem bytes.
func localInventory(dir string, entries []Shard, elem int) []ShardStatus {
	st := make([]ShardStatus, len(entries))
	for i, e := range entries {
		fi, err := os.Stat(filepath.Join(dir, e.File))
		switch {
		case err != nil || !fi.Mode().IsRegular():
			st[i] = Absent
		case fi.Size() != e.Tokens*int64(elem):
			st[i] = WrongSize
		default:
			st[i] = Present
		}
	}
	return st
}

// verifyLocal marks the present shards whose sha256 is not index.json's,
// or that cannot be read. It returns only ctx's error.
func verifyLocal(ctx context.Context, dir string, entries []Shard, st []ShardStatus) error {
	for i, e := range entries {
		if st[i] != Present {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		f, err := os.Open(filepath.Join(dir, e.File))
		if err != nil {
			st[i] = Unreadable
			continue
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		switch {
		case err != nil:
			st[i] = Unreadable
		case !strings.EqualFold(hex.EncodeToString(h.Sum(nil)), e.SHA256):
			st[i] = BadChecksum
		}
	}
	return nil
}

// The inventory travels as int64 words: a fixed header per rank, then a
// status byte per shard, eight to a word.
const (
	headerMagic = 0x67746e6f64656c31 // "gtnodel1"
	hostBytes   = 256
	headerWords = 7 + hostBytes/8
)

func encodeHeader(host string, shards int, sum [32]byte) []int64 {
	w := make([]int64, headerWords)
	w[0], w[1] = headerMagic, int64(shards)
	for i := range 4 {
		w[2+i] = int64(binary.LittleEndian.Uint64(sum[8*i:]))
	}
	h := []byte(host)
	if len(h) > hostBytes {
		h = h[:hostBytes]
	}
	w[6] = int64(len(h))
	var buf [hostBytes]byte
	copy(buf[:], h)
	for i := range hostBytes / 8 {
		w[7+i] = int64(binary.LittleEndian.Uint64(buf[8*i:]))
	}
	return w
}

// decodeHeaders returns every rank's host, or an error if a rank's
// index.json differs from rank 0's.
func decodeHeaders(w []int64, world int, dir string) ([]string, error) {
	hosts := make([]string, world)
	for r := range world {
		h := w[r*headerWords : (r+1)*headerWords]
		if h[0] != headerMagic || h[6] < 0 || h[6] > hostBytes {
			return nil, fmt.Errorf("%w: rank %d sent a malformed shard inventory", ErrShards, r)
		}
		var buf [hostBytes]byte
		for i := range hostBytes / 8 {
			binary.LittleEndian.PutUint64(buf[8*i:], uint64(h[7+i]))
		}
		hosts[r] = string(buf[:h[6]])
	}
	for r := range world {
		if w[r*headerWords+1] < 0 {
			return nil, fmt.Errorf("%w: host %s (rank %d) cannot read %s: copy the same index.json to every host",
				ErrShards, hosts[r], r, filepath.Join(dir, IndexFile))
		}
	}
	for r := 1; r < world; r++ {
		if !slices.Equal(w[r*headerWords+1:r*headerWords+6], w[1:6]) {
			return nil, fmt.Errorf("%w: %s/index.json differs between host %s (rank 0) and host %s (rank %d): copy the same index.json to every host",
				ErrShards, dir, hosts[0], hosts[r], r)
		}
	}
	return hosts, nil
}

func statusWords(n int) int { return (n + 7) / 8 }

func encodeStatus(st []ShardStatus, words int) []int64 {
	buf := make([]byte, words*8)
	for i, s := range st {
		buf[i] = byte(s)
	}
	w := make([]int64, words)
	for i := range w {
		w[i] = int64(binary.LittleEndian.Uint64(buf[8*i:]))
	}
	return w
}

func decodeStatus(w []int64, n int) []ShardStatus {
	buf := make([]byte, len(w)*8)
	for i, x := range w {
		binary.LittleEndian.PutUint64(buf[8*i:], uint64(x))
	}
	st := make([]ShardStatus, n)
	for i := range st {
		st[i] = ShardStatus(buf[i])
	}
	return st
}

// inventory is what one rank found on its host.
type inventory struct {
	host   string
	status []ShardStatus
}

// plan is the dealing every rank computes alike from the inventories.
type plan struct {
	hosts   []string // by rank
	shared  bool     // every rank holds every shard
	assign  [][]int  // by rank: the shards it reads, in index order
	windows []int    // by rank: the windows of its shards
	// epochLen is every rank's windows per epoch; total the split's
	// windows; skipped those no rank visits in an epoch.
	epochLen, total, skipped int
}

// windowsOf is the number of windows of t tokens (and a target), stride
// apart, in a shard of n tokens; windows do not cross shards.
func windowsOf(n int64, t, stride int) int {
	if n < int64(t)+1 {
		return 0
	}
	return int((n-int64(t)-1)/int64(stride)) + 1
}

// makePlan checks the inventories and deals the shards (see the guarantee
// at the top of this file). Its errors are the same on every rank.
func makePlan(dir, split string, entries []Shard, inv []inventory, t, stride int) (*plan, error) {
	world := len(inv)
	p := &plan{hosts: make([]string, world), shared: true}
	for r := range inv {
		p.hosts[r] = inv[r].host
	}
	// A bad file is named first: it may be why a shard looks missing.
	for i, e := range entries {
		for r := range inv {
			switch inv[r].status[i] {
			case WrongSize:
				return nil, fmt.Errorf("%w: host %s: %s has another size than index.json's %d tokens: a truncated or foreign file; copy it again",
					ErrShards, p.hosts[r], filepath.Join(dir, e.File), e.Tokens)
			case BadChecksum:
				return nil, fmt.Errorf("%w: host %s: %s does not match its sha256 in index.json: copy it again",
					ErrShards, p.hosts[r], filepath.Join(dir, e.File))
			case Unreadable:
				return nil, fmt.Errorf("%w: host %s: %s cannot be read", ErrShards, p.hosts[r], filepath.Join(dir, e.File))
			}
		}
	}
	holders := make([][]int, len(entries))
	var missing []int
	for i := range entries {
		for r := range inv {
			if inv[r].status[i] == Present {
				holders[i] = append(holders[i], r)
			}
		}
		if len(holders[i]) == 0 {
			missing = append(missing, i)
		}
		if len(holders[i]) != world {
			p.shared = false
		}
	}
	if len(missing) > 0 {
		more := ""
		if len(missing) > 1 {
			more = fmt.Sprintf(" (and %d more shards of the split)", len(missing)-1)
		}
		return nil, fmt.Errorf("%w: %s is on no host%s: checked %s in %s",
			ErrShards, entries[missing[0]].File, more, strings.Join(uniqueHosts(p.hosts), ", "), dir)
	}
	for _, h := range uniqueHosts(p.hosts) {
		holds := false
		for r := range inv {
			if p.hosts[r] == h && slices.Contains(inv[r].status, Present) {
				holds = true
			}
		}
		if !holds {
			return nil, fmt.Errorf("%w: host %s holds no shard of split %q in %s: give it some (gotrain data distribute) or leave it out of the job",
				ErrShards, h, split, dir)
		}
	}
	weights := make([]int, len(entries))
	for i, e := range entries {
		weights[i] = windowsOf(e.Tokens, t, stride)
		p.total += weights[i]
	}
	p.windows = make([]int, world)
	if p.shared {
		p.epochLen = (p.total + world - 1) / world
		for r := range p.windows {
			p.windows[r] = p.total
		}
		return p, nil
	}
	p.assign = Assign(weights, holders, world)
	p.epochLen = -1
	for r, shards := range p.assign {
		for _, i := range shards {
			p.windows[r] += weights[i]
		}
		if p.epochLen < 0 || p.windows[r] < p.epochLen {
			p.epochLen = p.windows[r]
		}
	}
	for r, n := range p.windows {
		if n == 0 {
			return nil, fmt.Errorf("%w: rank %d on host %s is dealt no window of %d tokens: its host's shards of split %q are fewer than its ranks or shorter than %d tokens; prepare more, smaller shards or run fewer ranks there",
				ErrShards, r, p.hosts[r], t, split, t+1)
		}
		p.skipped += n - p.epochLen
	}
	return p, nil
}

// uniqueHosts is hosts without repeats, in order of first appearance.
func uniqueHosts(hosts []string) []string {
	var u []string
	for _, h := range hosts {
		if !slices.Contains(u, h) {
			u = append(u, h)
		}
	}
	return u
}

// Assign deals shards to world ranks: shard i, of weight weights[i] (its
// windows), goes to one of holders[i] (the ranks that can read it). The
// heaviest shard goes first (ties: the lower index), each to the holder
// with the least weight so far (ties: the lower rank). It returns each
// rank's shards in ascending order. The result depends only on its
// arguments. It panics if a shard has no holder or a holder is outside
// [0, world).
func Assign(weights []int, holders [][]int, world int) [][]int {
	if len(holders) != len(weights) {
		panic(fmt.Sprintf("shards: Assign: %d weights for %d shards", len(weights), len(holders)))
	}
	order := make([]int, len(weights))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return weights[b] - weights[a] })
	load := make([]int, world)
	out := make([][]int, world)
	for _, i := range order {
		if len(holders[i]) == 0 {
			panic(fmt.Sprintf("shards: Assign: shard %d has no holder", i))
		}
		best := -1
		for _, r := range holders[i] {
			if r < 0 || r >= world {
				panic(fmt.Sprintf("shards: Assign: holder %d of shard %d outside [0, %d)", r, i, world))
			}
			if best < 0 || load[r] < load[best] || load[r] == load[best] && r < best {
				best = r
			}
		}
		load[best] += weights[i]
		out[best] = append(out[best], i)
	}
	for _, s := range out {
		slices.Sort(s)
	}
	return out
}

// NodeLocalSampler visits length of a rank's n node-local windows per
// epoch: a seed+epoch permutation's first length indices when shuffling,
// else the length indices that follow where the previous epoch stopped
// (wrapping around n). Every rank of a job has the same length, so the
// ranks take the same number of steps; over epochs every window is
// visited.
type NodeLocalSampler struct {
	n, length, replicas int
	shuffle             bool
	perm                *data.RandomSampler
	scratch             []int
	epoch, seen, skip   int
}

// NewNodeLocalSampler returns the sampler of a rank with n windows of
// which each epoch visits length, in a job of replicas ranks. It panics
// unless 0 <= length <= n and replicas > 0.
func NewNodeLocalSampler(n, length, replicas int, seed uint64, shuffle bool) *NodeLocalSampler {
	if length < 0 || length > n || replicas < 1 {
		panic(fmt.Sprintf("shards: NewNodeLocalSampler: %d of %d windows with %d replicas", length, n, replicas))
	}
	return &NodeLocalSampler{n: n, length: length, replicas: replicas, shuffle: shuffle, perm: data.NewRandomSampler(n, seed)}
}

// Len implements data.Sampler: the windows of one epoch.
func (s *NodeLocalSampler) Len() int { return s.length }

// SetEpoch selects the epoch of the next pass. A restored position
// applies to its own epoch only.
func (s *NodeLocalSampler) SetEpoch(epoch int) {
	if epoch < 0 {
		panic(fmt.Sprintf("shards: SetEpoch(%d): negative epoch", epoch))
	}
	if epoch != s.epoch {
		s.skip = 0
	}
	s.epoch = epoch
}

// Epoch returns the epoch of the next or current pass.
func (s *NodeLocalSampler) Epoch() int { return s.epoch }

// Advance implements data.ResumableSampler.
func (s *NodeLocalSampler) Advance(n int) { s.seen += n }

// AppendIndices implements data.Sampler: the epoch's windows after any
// restored position.
func (s *NodeLocalSampler) AppendIndices(dst []int) []int {
	skip := s.skip
	s.skip, s.seen = 0, skip
	if s.shuffle {
		s.perm.SetEpoch(s.epoch)
		s.scratch = s.perm.AppendIndices(s.scratch[:0])
		return append(dst, s.scratch[skip:s.length]...)
	}
	if s.n == 0 {
		return dst
	}
	start := int((int64(s.epoch) * int64(s.length)) % int64(s.n))
	for k := skip; k < s.length; k++ {
		dst = append(dst, (start+k)%s.n)
	}
	return dst
}

// State implements data.ResumableSampler.
func (s *NodeLocalSampler) State() data.SamplerState {
	return data.SamplerState{Epoch: s.epoch, Seen: s.seen, Replicas: s.replicas}
}

// Restore implements data.ResumableSampler. A state of the same number
// of replicas resumes at the exact window. One of another number resumes
// its epoch at the same share of all the windows seen: the shards are
// dealt anew, so windows of the rest of that epoch may repeat or be left
// out.
func (s *NodeLocalSampler) Restore(st data.SamplerState) error {
	seen := st.Seen
	if st.Replicas < 0 {
		return fmt.Errorf("%w: replicas %d is negative", data.ErrInvalidState, st.Replicas)
	}
	if st.Replicas != 0 && st.Replicas != s.replicas && seen > 0 {
		seen = min(seen*st.Replicas/s.replicas, s.length)
	}
	if st.Epoch < 0 || seen < 0 || seen > s.length {
		return fmt.Errorf("%w: epoch %d, seen %d (want epoch >= 0 and seen in [0, %d])", data.ErrInvalidState, st.Epoch, st.Seen, s.length)
	}
	s.epoch, s.seen, s.skip = st.Epoch, seen, seen
	return nil
}
