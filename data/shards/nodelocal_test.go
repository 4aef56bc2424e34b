package shards

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gotrain/gotrain/data"
)

func TestAssignGreedyLargestFirst(t *testing.T) {
	// Shards 0..5 of weights 5 9 3 9 1 4; ranks 0, 1 hold everything but
	// shard 2 (only rank 2) and shard 4 (ranks 1, 2).
	weights := []int{5, 9, 3, 9, 1, 4}
	holders := [][]int{{0, 1, 2}, {0, 1, 2}, {2}, {0, 1, 2}, {1, 2}, {0, 1, 2}}
	// Order 1(9) 3(9) 0(5) 5(4) 2(3) 4(1):
	// 1→r0 (all 0, lowest rank); 3→r1; 0→r2; 5→r2 (5 < 9, 9); 2→r2 (only holder);
	// 4→r1 (r1 9, r2 12).
	want := [][]int{{1}, {3, 4}, {0, 2, 5}}
	got := Assign(weights, holders, 3)
	if !equalDeal(got, want) {
		t.Fatalf("Assign = %v, want %v", got, want)
	}
	if again := Assign(weights, holders, 3); !equalDeal(again, got) {
		t.Fatalf("Assign is not deterministic: %v then %v", got, again)
	}
}

func TestAssignEachShardOnceToAHolder(t *testing.T) {
	// 40 shards of uneven sizes on 3 hosts × 2 ranks, each shard on one
	// or two hosts.
	const world, n = 6, 40
	weights := make([]int, n)
	holders := make([][]int, n)
	for i := range n {
		weights[i] = 100 + (i*37)%91
		h := i % 3
		holders[i] = []int{2 * h, 2*h + 1}
		if i%4 == 0 {
			o := (h + 1) % 3
			holders[i] = append(holders[i], 2*o, 2*o+1)
			slices.Sort(holders[i])
		}
	}
	deal := Assign(weights, holders, world)
	count := make([]int, n)
	loads := make([]int, world)
	for r, shards := range deal {
		if !slices.IsSorted(shards) {
			t.Errorf("rank %d's shards %v are not in index order", r, shards)
		}
		for _, i := range shards {
			count[i]++
			loads[r] += weights[i]
			if !slices.Contains(holders[i], r) {
				t.Errorf("shard %d dealt to rank %d, which does not hold it (holders %v)", i, r, holders[i])
			}
		}
	}
	for i, c := range count {
		if c != 1 {
			t.Errorf("shard %d dealt %d times, want once", i, c)
		}
	}
	// Greedy largest-first bounds any two ranks of one host to within
	// the largest weight.
	for h := range 3 {
		if d := loads[2*h] - loads[2*h+1]; d > 190 || d < -190 {
			t.Errorf("host %d's ranks have loads %d and %d", h, loads[2*h], loads[2*h+1])
		}
	}
	t.Logf("loads %v", loads)
}

func equalDeal(a, b [][]int) bool {
	return slices.EqualFunc(a, b, func(x, y []int) bool { return slices.Equal(x, y) })
}

// entriesOf is a split of shards of the given token counts.
func entriesOf(tokens ...int64) []Shard {
	var es []Shard
	for i, n := range tokens {
		es = append(es, Shard{File: fixtureName(i), Split: "train", Tokens: n})
	}
	return es
}

func fixtureName(i int) string { return "train-" + string(rune('a'+i)) + ".bin" }

// statuses is an inventory from a string: 'P' present, '.' absent, 'S'
// wrong size, 'C' bad checksum, 'U' unreadable.
func statuses(s string) []ShardStatus {
	st := make([]ShardStatus, len(s))
	for i, c := range s {
		st[i] = map[rune]ShardStatus{'P': Present, '.': Absent, 'S': WrongSize, 'C': BadChecksum, 'U': Unreadable}[c]
	}
	return st
}

func TestPlanMissingShardNamesFileAndHosts(t *testing.T) {
	es := entriesOf(100, 100, 100, 100)
	inv := []inventory{{"node0", statuses("P.P.")}, {"node0", statuses("P.P.")}, {"node1", statuses("P...")}}
	_, err := makePlan("/data/tok", "train", es, inv, 8, 1)
	if !errors.Is(err, ErrShards) {
		t.Fatalf("err = %v, want ErrShards", err)
	}
	want := "shards: node-local data: train-b.bin is on no host (and 1 more shards of the split): checked node0, node1 in /data/tok"
	if err.Error() != want {
		t.Errorf("error\n%s\nwant\n%s", err, want)
	}
}

func TestPlanErrors(t *testing.T) {
	es := entriesOf(100, 100, 100)
	for _, c := range []struct {
		name string
		inv  []inventory
		want string
	}{
		{"host with none", []inventory{{"node0", statuses("PPP")}, {"node1", statuses("...")}},
			`host node1 holds no shard of split "train" in /d`},
		{"wrong size", []inventory{{"node0", statuses("PP.")}, {"node1", statuses("..S")}},
			"host node1: /d/train-c.bin has another size than index.json's 100 tokens"},
		{"checksum", []inventory{{"node0", statuses("CP.")}, {"node1", statuses("PPP")}},
			"host node0: /d/train-a.bin does not match its sha256"},
		{"unreadable", []inventory{{"node0", statuses("PPP")}, {"node1", statuses("U..")}},
			"host node1: /d/train-a.bin cannot be read"},
		{"rank without a window", []inventory{{"node0", statuses("PP.")}, {"node1", statuses("..P")}, {"node1", statuses("..P")}},
			"rank 2 on host node1 is dealt no window of 8 tokens"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := makePlan("/d", "train", es, c.inv, 8, 1)
			if !errors.Is(err, ErrShards) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("err = %v, want one line containing %q", err, c.want)
			}
		})
	}
}

func TestPlanSharedWhenEveryRankHoldsAll(t *testing.T) {
	es := entriesOf(100, 50, 30)
	inv := []inventory{{"a", statuses("PPP")}, {"a", statuses("PPP")}, {"b", statuses("PPP")}}
	p, err := makePlan("/d", "train", es, inv, 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !p.shared || p.assign != nil {
		t.Errorf("plan %+v: want shared, no dealing", p)
	}
	if want := 92 + 42 + 22; p.total != want || p.epochLen != (want+2)/3 || p.skipped != 0 {
		t.Errorf("total %d, epoch %d, skipped %d; want %d, %d, 0", p.total, p.epochLen, p.skipped, want, (want+2)/3)
	}
}

// TestPlanSkippedFraction measures the windows a node-local epoch leaves
// out for a split whose shard sizes vary by ±20%, each shard on one of 2
// hosts (as `gotrain data distribute` deals them), with 2 ranks per host.
func TestPlanSkippedFraction(t *testing.T) {
	const shards, T = 64, 64
	var tokens []int64
	for i := range shards {
		tokens = append(tokens, 8000+int64((i*7919)%3200)-1600)
	}
	es := entriesOf(tokens...)
	var h0, h1 strings.Builder
	for i := range shards {
		if i%2 == 0 {
			h0.WriteByte('P')
			h1.WriteByte('.')
		} else {
			h0.WriteByte('.')
			h1.WriteByte('P')
		}
	}
	inv := []inventory{{"a", statuses(h0.String())}, {"a", statuses(h0.String())}, {"b", statuses(h1.String())}, {"b", statuses(h1.String())}}
	p, err := makePlan("/d", "train", es, inv, T, 1)
	if err != nil {
		t.Fatal(err)
	}
	skipped := 0
	for _, n := range p.windows {
		skipped += n - slices.Min(p.windows)
	}
	total := 0
	for _, n := range tokens {
		total += int(n) - T
	}
	if p.total != total || p.skipped != skipped || p.epochLen != slices.Min(p.windows) {
		t.Fatalf("plan total %d skipped %d epoch %d; want %d, %d, %d", p.total, p.skipped, p.epochLen, total, skipped, slices.Min(p.windows))
	}
	frac := float64(p.skipped) / float64(p.total)
	t.Logf("64 shards of 6400-9599 tokens on 2 hosts × 2 ranks: per-rank windows %v, %d of %d skipped per epoch (%.2f%%)",
		p.windows, p.skipped, p.total, 100*frac)
	if frac > 0.05 {
		t.Errorf("%.2f%% of the windows skipped per epoch; greedy dealing of 32 shards a host should leave out under 5%%", 100*frac)
	}
}

func TestInventoryEncoding(t *testing.T) {
	sum := sha256.Sum256([]byte("index"))
	host := strings.Repeat("h", 300) // longer than the header holds
	w := append(encodeHeader("node0", 11, sum), encodeHeader(host, 11, sum)...)
	hosts, err := decodeHeaders(w, 2, "/d")
	if err != nil {
		t.Fatal(err)
	}
	if hosts[0] != "node0" || hosts[1] != host[:hostBytes] {
		t.Errorf("hosts %q", hosts)
	}
	other := sha256.Sum256([]byte("other index"))
	w = append(encodeHeader("node0", 11, sum), encodeHeader("node1", 11, other)...)
	if _, err := decodeHeaders(w, 2, "/d"); err == nil || !strings.Contains(err.Error(), "/d/index.json differs between host node0 (rank 0) and host node1 (rank 1)") {
		t.Errorf("different index files: err = %v", err)
	}
	st := statuses("P.SCPP.P.PPU")
	if got := decodeStatus(encodeStatus(st, statusWords(len(st))), len(st)); !slices.Equal(got, st) {
		t.Errorf("status round trip %v, want %v", got, st)
	}
}

func TestNodeLocalSamplerEpochs(t *testing.T) {
	for _, shuffle := range []bool{false, true} {
		s := NewNodeLocalSampler(10, 4, 2, 3, shuffle)
		seen := map[int]bool{}
		var orders [][]int
		for epoch := range 3 {
			s.SetEpoch(epoch)
			idx := s.AppendIndices(nil)
			if len(idx) != 4 {
				t.Fatalf("shuffle=%v epoch %d: %d indices, want 4", shuffle, epoch, len(idx))
			}
			u := map[int]bool{}
			for _, i := range idx {
				if i < 0 || i >= 10 || u[i] {
					t.Fatalf("shuffle=%v epoch %d: indices %v repeat or leave [0, 10)", shuffle, epoch, idx)
				}
				u[i], seen[i] = true, true
			}
			orders = append(orders, idx)
		}
		if !shuffle {
			want := [][]int{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 0, 1}}
			if !equalDeal(orders, want) {
				t.Errorf("unshuffled epochs %v, want %v", orders, want)
			}
		} else if equalDeal(orders[:1], orders[1:2]) {
			t.Errorf("shuffled epochs 0 and 1 visit the same windows in the same order: %v", orders)
		}
		if !shuffle && len(seen) != 10 {
			t.Errorf("3 unshuffled epochs of 4 of 10 windows visit %d windows, want all", len(seen))
		}
	}
}

// TestNodeLocalSamplerResume stops a Loader mid-epoch, saves the
// sampler's state, and resumes a new sampler from it: the batches after
// the restore are exactly the rest of the interrupted epoch.
func TestNodeLocalSamplerResume(t *testing.T) {
	toks := make([]int, 200)
	for i := range toks {
		toks[i] = i % 50
	}
	ds, err := data.NewTokenWindows(toks, 50, 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	run := func(s *NodeLocalSampler, epoch, stopAfter int) (firsts []int) {
		s.SetEpoch(epoch)
		l := data.NewSequenceLoader(ds, 5, s, data.DropLast(true))
		for b := range l.Batches() {
			firsts = append(firsts, b.Indices...)
			if len(firsts) == stopAfter {
				break
			}
		}
		return firsts
	}
	full := run(NewNodeLocalSampler(ds.Len(), 120, 2, 9, true), 3, -1)
	if len(full) != 120 {
		t.Fatalf("an epoch visited %d windows, want 120", len(full))
	}
	a := NewNodeLocalSampler(ds.Len(), 120, 2, 9, true)
	head := run(a, 3, 35)
	st := a.State()
	if st != (data.SamplerState{Epoch: 3, Seen: 35, Replicas: 2}) {
		t.Fatalf("state %+v", st)
	}
	b := NewNodeLocalSampler(ds.Len(), 120, 2, 9, true)
	if err := b.Restore(st); err != nil {
		t.Fatal(err)
	}
	tail := run(b, 3, -1)
	if got := append(head, tail...); !slices.Equal(got, full) {
		t.Errorf("resumed epoch\n%v\nwant\n%v", got, full)
	}
	if b.State().Seen != 120 {
		t.Errorf("after the resumed epoch seen = %d, want 120", b.State().Seen)
	}
	// The next epoch starts from its beginning.
	if next := run(b, 4, -1); len(next) != 120 {
		t.Errorf("the epoch after a resumed one visits %d windows", len(next))
	}
	if err := b.Restore(data.SamplerState{Epoch: 0, Seen: 121, Replicas: 2}); !errors.Is(err, data.ErrInvalidState) {
		t.Errorf("restoring past the epoch: err = %v", err)
	}
	// Another world: the same share of the epoch.
	c := NewNodeLocalSampler(ds.Len(), 120, 4, 9, true)
	if err := c.Restore(data.SamplerState{Epoch: 1, Seen: 40, Replicas: 2}); err != nil || c.State().Seen != 20 {
		t.Errorf("restore from 2 replicas into 4: err %v, seen %d, want 20", err, c.State().Seen)
	}
}

// writeFixture writes a split "train" of uint16 shards with the given
// token counts into dir (index.json lists them all; only the files keep
// says are written, nil meaning all), tokens i*7+j mod vocab.
func writeFixture(t *testing.T, dir string, counts []int, keep func(i int) bool) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	type entry struct {
		File   string `json:"file"`
		Split  string `json:"split"`
		Tokens int    `json:"tokens"`
		SHA256 string `json:"sha256"`
	}
	var es []entry
	for i, n := range counts {
		b := make([]byte, 2*n)
		for j := range n {
			binary.LittleEndian.PutUint16(b[2*j:], uint16((i*7+j)%97))
		}
		sum := sha256.Sum256(b)
		name := fixtureName(i)
		es = append(es, entry{File: name, Split: "train", Tokens: n, SHA256: hex.EncodeToString(sum[:])})
		if keep == nil || keep(i) {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	ix, err := json.Marshal(map[string]any{"format": "gotrain-token-shards/1", "tokenizer": "test", "vocab_size": 97,
		"eot": -1, "dtype": "uint16", "shards": es})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "index.json"), ix, 0o644); err != nil {
		t.Fatal(err)
	}
}

// localGroup is an in-process group of size ranks whose AllGather meets
// at a barrier.
type localGroup struct {
	size int
	mu   sync.Mutex
	cond *sync.Cond
	gen  int
	in   [][]int64
	out  []int64
}

func newLocalGroup(size int) *localGroup {
	g := &localGroup{size: size, in: make([][]int64, size)}
	g.cond = sync.NewCond(&g.mu)
	return g
}

type rankOf struct {
	*localGroup
	rank int
}

func (r rankOf) Rank() int { return r.rank }
func (r rankOf) Size() int { return r.size }
func (r rankOf) AllGather(ctx context.Context, dst, src any) error {
	g := r.localGroup
	g.mu.Lock()
	defer g.mu.Unlock()
	gen := g.gen
	g.in[r.rank] = slices.Clone(src.([]int64))
	n := 0
	for _, b := range g.in {
		if b != nil {
			n++
		}
	}
	if n == g.size {
		g.out = slices.Concat(g.in...)
		g.in = make([][]int64, g.size)
		g.gen++
		g.cond.Broadcast()
	}
	for g.gen == gen {
		g.cond.Wait()
	}
	copy(dst.([]int64), g.out)
	return nil
}

// openAllRanks runs OpenNodeLocal on world in-process ranks, rank r on host
// hosts[r] reading dirs[r].
func openAllRanks(t *testing.T, hosts, dirs []string, T int, opts NodeLocalOptions) ([]*NodeLocal, []error) {
	t.Helper()
	g := newLocalGroup(len(hosts))
	nls := make([]*NodeLocal, len(hosts))
	errs := make([]error, len(hosts))
	var wg sync.WaitGroup
	for r := range hosts {
		wg.Go(func() {
			o := opts
			o.Host = hosts[r]
			nls[r], errs[r] = OpenNodeLocal(context.Background(), rankOf{g, r}, dirs[r], "train", T, 1, o)
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, nl := range nls {
			if nl != nil {
				nl.Close()
			}
		}
	})
	return nls, errs
}

func TestOpenNodeLocalHalves(t *testing.T) {
	root := t.TempDir()
	counts := []int{300, 200, 260, 180, 220, 240}
	a, b := filepath.Join(root, "a"), filepath.Join(root, "b")
	writeFixture(t, a, counts, func(i int) bool { return i%2 == 0 })
	writeFixture(t, b, counts, func(i int) bool { return i%2 == 1 })
	nls, errs := openAllRanks(t, []string{"a", "a", "b", "b"}, []string{a, a, b, b}, 16, NodeLocalOptions{Seed: 1, Verify: true})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	var files []string
	for r, nl := range nls {
		if nl.Shared {
			t.Errorf("rank %d: Shared with half the shards on each host", r)
		}
		files = append(files, nl.Files...)
		for _, f := range nl.Files {
			i := int(f[len("train-")] - 'a')
			if (r < 2) != (i%2 == 0) {
				t.Errorf("rank %d on host %s reads %s, which its host does not hold", r, []string{"a", "a", "b", "b"}[r], f)
			}
		}
		if nl.Sampler.Len() != nls[0].Sampler.Len() {
			t.Errorf("rank %d's epoch is %d windows, rank 0's %d", r, nl.Sampler.Len(), nls[0].Sampler.Len())
		}
		if nl.Windows.Len() < nl.Sampler.Len() {
			t.Errorf("rank %d: epoch of %d of its %d windows", r, nl.Sampler.Len(), nl.Windows.Len())
		}
	}
	slices.Sort(files)
	if len(files) != len(counts) || len(slices.Compact(files)) != len(counts) {
		t.Errorf("shards read %v: want each of %d exactly once", files, len(counts))
	}
	t.Logf("epoch of %d windows per rank; %d of %d skipped", nls[0].EpochWindows, nls[0].SkippedWindows, nls[0].TotalWindows)
}

func TestOpenNodeLocalMissingShardSameErrorOnEveryRank(t *testing.T) {
	root := t.TempDir()
	counts := []int{100, 100, 100, 100}
	a, b := filepath.Join(root, "a"), filepath.Join(root, "b")
	writeFixture(t, a, counts, func(i int) bool { return i < 2 })
	writeFixture(t, b, counts, func(i int) bool { return i == 2 })
	dirs := []string{a, b, b}
	_, errs := openAllRanks(t, []string{"node0", "node1", "node1"}, dirs, 8, NodeLocalOptions{})
	// On real hosts the directory is the same path everywhere; here each
	// host's is its own.
	want := "shards: node-local data: train-d.bin is on no host: checked node0, node1 in DIR"
	for r, err := range errs {
		if err == nil || strings.ReplaceAll(err.Error(), dirs[r], "DIR") != want {
			t.Errorf("rank %d: err %v, want %q", r, err, want)
		}
	}
}

func TestOpenNodeLocalCorruptShardWithVerify(t *testing.T) {
	root := t.TempDir()
	counts := []int{100, 100}
	a := filepath.Join(root, "a")
	writeFixture(t, a, counts, nil)
	f := filepath.Join(a, fixtureName(1))
	b, _ := os.ReadFile(f)
	b[10] ^= 1
	os.WriteFile(f, b, 0o644)
	if _, errs := openAllRanks(t, []string{"a", "a"}, []string{a, a}, 8, NodeLocalOptions{}); errs[0] != nil {
		t.Fatalf("without Verify a flipped bit goes unnoticed, but: %v", errs[0])
	}
	_, errs := openAllRanks(t, []string{"a", "a"}, []string{a, a}, 8, NodeLocalOptions{Verify: true})
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "host a: "+f+" does not match its sha256") {
			t.Errorf("rank %d: err %v", r, err)
		}
	}
}

// TestOpenNodeLocalSharedIsDistributedSampler: with every shard on every
// host the ranks get the window set of Open and the DistributedSampler of
// a shared file system.
func TestOpenNodeLocalSharedIsDistributedSampler(t *testing.T) {
	root := t.TempDir()
	counts := []int{120, 90, 150}
	a, b := filepath.Join(root, "a"), filepath.Join(root, "b")
	writeFixture(t, a, counts, nil)
	writeFixture(t, b, counts, nil)
	nls, errs := openAllRanks(t, []string{"a", "b", "b"}, []string{a, b, b}, 8, NodeLocalOptions{Seed: 5})
	toks, err := Open(a, "train")
	if err != nil {
		t.Fatal(err)
	}
	defer toks.Close()
	ws, err := toks.Windows(8, 1)
	if err != nil {
		t.Fatal(err)
	}
	for r, nl := range nls {
		if errs[r] != nil {
			t.Fatal(errs[r])
		}
		if !nl.Shared || nl.Windows.Len() != ws.Len() {
			t.Fatalf("rank %d: shared %v, %d windows; want shared, %d", r, nl.Shared, nl.Windows.Len(), ws.Len())
		}
		want := data.NewDistributedSampler(ws.Len(), 3, r, data.Seed(5))
		want.SetEpoch(2)
		nl.Sampler.SetEpoch(2)
		if got, w := nl.Sampler.AppendIndices(nil), want.AppendIndices(nil); !slices.Equal(got, w) {
			t.Errorf("rank %d: epoch 2 visits %v, the DistributedSampler %v", r, got, w)
		}
		x, y := make([]int, 8), make([]int, 8)
		x2, y2 := make([]int, 8), make([]int, 8)
		for i := range ws.Len() {
			nl.Windows.Sequence(i, x, y)
			ws.Sequence(i, x2, y2)
			if !slices.Equal(x, x2) || !slices.Equal(y, y2) {
				t.Fatalf("rank %d: window %d differs from Open's", r, i)
			}
		}
	}
}

// TestOpenNodeLocalNoIndexOnOneHost: a host without index.json stops
// every rank, each naming it, instead of leaving the others waiting.
func TestOpenNodeLocalNoIndexOnOneHost(t *testing.T) {
	root := t.TempDir()
	a, b := filepath.Join(root, "a"), filepath.Join(root, "b")
	writeFixture(t, a, []int{100, 100}, nil)
	if err := os.MkdirAll(b, 0o755); err != nil {
		t.Fatal(err)
	}
	_, errs := openAllRanks(t, []string{"node0", "node1"}, []string{a, b}, 8, NodeLocalOptions{})
	if errs[1] == nil || !strings.HasPrefix(errs[1].Error(), "host node1: shards: ") || !strings.Contains(errs[1].Error(), b+" is not a prepared dataset") {
		t.Errorf("rank 1: err %v", errs[1])
	}
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "host node1 (rank 1) cannot read "+filepath.Join(a, "index.json")) {
		t.Errorf("rank 0: err %v", errs[0])
	}
}
