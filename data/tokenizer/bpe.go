package tokenizer

import (
	"container/heap"
	"fmt"
	"hash/maphash"
	"math"
	"sort"
	"strings"
	"sync"
)

// BPE is a byte-level byte-pair-encoding tokenizer. Its methods are safe
// for concurrent use.
type BPE struct {
	name    string
	pattern Pattern
	// vocab holds the bytes of each id; nil for ids that are not tokens.
	vocab [][]byte
	// ids maps token bytes to ids (special tokens excluded).
	ids map[string]int
	// merges maps an adjacent pair of ids to its merge rank and result as
	// rank<<32|id. nil means tiktoken ranks: a pair merges if the
	// concatenation of its bytes is a token, lowest id first.
	merges map[uint64]uint64
	// mergeList holds the merged pairs in rank order (nil for tiktoken
	// ranks), for saving.
	mergeList [][2]int32
	byteIDs   [256]int32
	// specials maps special-token text to its id; specialNames holds them
	// in order.
	specials     map[string]int
	specialNames []string
	// specialOrder is the order special tokens are saved in.
	specialOrder []string
	eot          int
	hasEOT       bool
	// addPrefixSpace prepends a space to text that does not start with
	// one (HF ByteLevel add_prefix_space).
	addPrefixSpace bool
	// wholeFirst emits a piece that is itself a token without merging
	// (tiktoken always; HF BPE ignore_merges).
	wholeFirst bool

	seed  maphash.Seed
	cache [cacheShards]cacheShard
}

const (
	cacheShards   = 64
	cacheShardCap = 8192
	noRank        = math.MaxUint32
	// heapMin is the piece length from which merging uses a heap, which is
	// O(n log n); shorter pieces use a linear scan per merge, which is
	// faster for them.
	heapMin = 128
)

type cacheShard struct {
	mu sync.RWMutex
	m  map[string][]int32
}

// newBPE returns a BPE over vocab (id → bytes), checking that every byte
// is a token.
func newBPE(name string, pattern Pattern, vocab [][]byte, merges map[uint64]uint64, specials map[string]int) (*BPE, error) {
	b := &BPE{
		name:     name,
		pattern:  pattern,
		vocab:    vocab,
		ids:      make(map[string]int, len(vocab)),
		merges:   merges,
		specials: map[string]int{},
		seed:     maphash.MakeSeed(),
	}
	for id, tok := range vocab {
		if tok == nil {
			continue
		}
		if prev, dup := b.ids[string(tok)]; dup {
			return nil, fmt.Errorf("tokenizer %s: ids %d and %d have the same bytes %q", name, prev, id, tok)
		}
		b.ids[string(tok)] = id
	}
	for i := range 256 {
		id, ok := b.ids[string([]byte{byte(i)})]
		if !ok {
			return nil, fmt.Errorf("tokenizer %s: byte 0x%02x has no token (a byte-level vocabulary needs all 256)", name, i)
		}
		b.byteIDs[i] = int32(id)
	}
	for s, id := range specials {
		if err := b.addSpecial(s, id); err != nil {
			return nil, err
		}
	}
	b.wholeFirst = merges == nil
	return b, nil
}

func (b *BPE) addSpecial(s string, id int) error {
	if s == "" || id < 0 {
		return fmt.Errorf("tokenizer %s: bad special token %q id %d", b.name, s, id)
	}
	if prev, ok := b.specials[s]; ok && prev != id {
		return fmt.Errorf("tokenizer %s: special token %q has ids %d and %d", b.name, s, prev, id)
	}
	b.specials[s] = id
	b.specialNames = append(b.specialNames, s)
	sort.Strings(b.specialNames)
	if s == "<|endoftext|>" {
		b.eot, b.hasEOT = id, true
	}
	return nil
}

// Name is the tokenizer's name: the built-in encoding or the file it was
// loaded from.
func (b *BPE) Name() string { return b.name }

// VocabSize returns one more than the largest id, special tokens included.
func (b *BPE) VocabSize() int {
	n := len(b.vocab)
	for _, id := range b.specials {
		n = max(n, id+1)
	}
	return n
}

// EndOfText returns the id of <|endoftext|> if the tokenizer has it.
func (b *BPE) EndOfText() (int, bool) { return b.eot, b.hasEOT }

// SpecialTokens returns the special-token texts, sorted.
func (b *BPE) SpecialTokens() []string { return append([]string(nil), b.specialNames...) }

// SpecialID returns the id of a special token.
func (b *BPE) SpecialID(s string) (int, bool) {
	id, ok := b.specials[s]
	return id, ok
}

// Encode encodes text as ordinary text: special-token text is split like
// any other text (tiktoken's encode_ordinary).
func (b *BPE) Encode(text string) []int {
	return b.AppendEncode(make([]int, 0, len(text)/4+1), text)
}

// AppendEncode appends the ids of ordinary text to dst.
func (b *BPE) AppendEncode(dst []int, text string) []int {
	if text == "" {
		return dst
	}
	if b.addPrefixSpace && text[0] != ' ' {
		text = " " + text
	}
	return b.appendPlain(dst, text)
}

// EncodeWithSpecial encodes text, turning each occurrence of a special
// token named in allowed into its id (tiktoken's encode with
// allowed_special; special-token text not in allowed is ordinary text).
// Names in allowed that are not special tokens are ignored.
func (b *BPE) EncodeWithSpecial(text string, allowed []string) []int {
	var specials []string
	for _, s := range allowed {
		if _, ok := b.specials[s]; ok {
			specials = append(specials, s)
		}
	}
	out := make([]int, 0, len(text)/4+1)
	for text != "" {
		at, tok := -1, ""
		for _, s := range specials {
			k := strings.Index(text, s)
			if k >= 0 && (at < 0 || k < at || (k == at && len(s) > len(tok))) {
				at, tok = k, s
			}
		}
		if at < 0 {
			return b.AppendEncode(out, text)
		}
		out = b.AppendEncode(out, text[:at])
		out = append(out, b.specials[tok])
		text = text[at+len(tok):]
	}
	return out
}

// Decode returns the text of ids; special tokens decode to their text.
func (b *BPE) Decode(ids []int) (string, error) {
	buf, err := b.AppendDecode(nil, ids)
	return string(buf), err
}

// AppendDecode appends the bytes of ids to dst.
func (b *BPE) AppendDecode(dst []byte, ids []int) ([]byte, error) {
	for i, id := range ids {
		if id >= 0 && id < len(b.vocab) && b.vocab[id] != nil {
			dst = append(dst, b.vocab[id]...)
			continue
		}
		if s, ok := b.specialText(id); ok {
			dst = append(dst, s...)
			continue
		}
		return dst, fmt.Errorf("tokenizer %s: id %d at position %d is outside the vocabulary (size %d)", b.name, id, i, b.VocabSize())
	}
	return dst, nil
}

func (b *BPE) specialText(id int) (string, bool) {
	for s, sid := range b.specials {
		if sid == id {
			return s, true
		}
	}
	return "", false
}

// TokenBytes returns the bytes of id (special tokens: their text).
func (b *BPE) TokenBytes(id int) ([]byte, bool) {
	if id >= 0 && id < len(b.vocab) && b.vocab[id] != nil {
		return b.vocab[id], true
	}
	s, ok := b.specialText(id)
	return []byte(s), ok
}

// appendPiece appends the ids of one pre-tokenized piece.
func (b *BPE) appendPiece(dst []int, piece string) []int {
	if len(piece) == 1 {
		return append(dst, int(b.byteIDs[piece[0]]))
	}
	if b.wholeFirst {
		if id, ok := b.ids[piece]; ok {
			return append(dst, id)
		}
	}
	sh := &b.cache[maphash.String(b.seed, piece)%cacheShards]
	sh.mu.RLock()
	ids, ok := sh.m[piece]
	sh.mu.RUnlock()
	if ok {
		for _, id := range ids {
			dst = append(dst, int(id))
		}
		return dst
	}
	var ids32 []int32
	if len(piece) >= heapMin {
		ids32 = b.mergeHeap(piece)
	} else {
		ids32 = b.mergeScan(piece)
	}
	sh.mu.Lock()
	if sh.m == nil || len(sh.m) >= cacheShardCap {
		sh.m = make(map[string][]int32, 256)
	}
	sh.m[strings.Clone(piece)] = ids32
	sh.mu.Unlock()
	for _, id := range ids32 {
		dst = append(dst, int(id))
	}
	return dst
}

// ResetCache empties the cache of encoded pieces (for measuring cold
// encoding speed).
func (b *BPE) ResetCache() {
	for i := range b.cache {
		sh := &b.cache[i]
		sh.mu.Lock()
		sh.m = nil
		sh.mu.Unlock()
	}
}

// pair returns the rank and result of merging the part piece[lo:mid]
// (id l) with piece[mid:hi] (id r); rank noRank if they do not merge.
func (b *BPE) pair(piece string, lo, hi int, l, r int32) (uint32, int32) {
	if b.merges == nil {
		if id, ok := b.ids[piece[lo:hi]]; ok {
			return uint32(id), int32(id)
		}
		return noRank, -1
	}
	if m, ok := b.merges[uint64(uint32(l))<<32|uint64(uint32(r))]; ok {
		return uint32(m >> 32), int32(uint32(m))
	}
	return noRank, -1
}

// mergeScan merges a piece by repeatedly merging the adjacent pair of
// lowest rank, leftmost first (tiktoken's byte_pair_merge).
func (b *BPE) mergeScan(piece string) []int32 {
	n := len(piece)
	var startsBuf [heapMin + 1]int
	var idsBuf, resBuf [heapMin]int32
	var rankBuf [heapMin]uint32
	starts, ids, res, ranks := startsBuf[:n+1], idsBuf[:n], resBuf[:n], rankBuf[:n]
	for i := 0; i < n; i++ {
		starts[i] = i
		ids[i] = b.byteIDs[piece[i]]
	}
	starts[n] = n
	for i := 0; i < n-1; i++ {
		ranks[i], res[i] = b.pair(piece, i, i+2, ids[i], ids[i+1])
	}
	ranks[n-1] = noRank
	for n > 1 {
		best, bi := uint32(noRank), -1
		for i := 0; i < n-1; i++ {
			if ranks[i] < best {
				best, bi = ranks[i], i
			}
		}
		if bi < 0 {
			break
		}
		ids[bi] = res[bi]
		copy(starts[bi+1:], starts[bi+2:n+1])
		copy(ids[bi+1:], ids[bi+2:n])
		copy(res[bi+1:], res[bi+2:n])
		copy(ranks[bi+1:], ranks[bi+2:n])
		n--
		starts, ids, res, ranks = starts[:n+1], ids[:n], res[:n], ranks[:n]
		if bi < n-1 {
			ranks[bi], res[bi] = b.pair(piece, starts[bi], starts[bi+2], ids[bi], ids[bi+1])
		} else {
			ranks[bi] = noRank
		}
		if bi > 0 {
			ranks[bi-1], res[bi-1] = b.pair(piece, starts[bi-1], starts[bi+1], ids[bi-1], ids[bi])
		}
	}
	return append([]int32(nil), ids...)
}

// mergeEntry is a candidate merge of the part at pos with its successor.
type mergeEntry struct {
	rank uint32
	pos  int32
}

type mergeHeapQ []mergeEntry

func (h mergeHeapQ) Len() int { return len(h) }
func (h mergeHeapQ) Less(i, j int) bool {
	if h[i].rank != h[j].rank {
		return h[i].rank < h[j].rank
	}
	return h[i].pos < h[j].pos
}
func (h mergeHeapQ) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *mergeHeapQ) Push(x any)   { *h = append(*h, x.(mergeEntry)) }
func (h *mergeHeapQ) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// mergeHeap gives the same result as mergeScan in O(n log n): parts are a
// linked list over byte positions, candidate merges a heap ordered by
// (rank, position); stale candidates are skipped when popped.
func (b *BPE) mergeHeap(piece string) []int32 {
	n := len(piece)
	next := make([]int32, n) // start of the next part; n at the end
	prev := make([]int32, n) // start of the previous part; -1 at the start
	ids := make([]int32, n)  // id of the part starting here; -1 if none
	for i := range n {
		next[i], prev[i], ids[i] = int32(i+1), int32(i-1), b.byteIDs[piece[i]]
	}
	end := func(p int32) int {
		if q := next[p]; q < int32(n) {
			return int(next[q])
		}
		return -1
	}
	h := make(mergeHeapQ, 0, n)
	for i := 0; i < n-1; i++ {
		if r, _ := b.pair(piece, i, i+2, ids[i], ids[i+1]); r != noRank {
			h = append(h, mergeEntry{r, int32(i)})
		}
	}
	heap.Init(&h)
	for h.Len() > 0 {
		e := heap.Pop(&h).(mergeEntry)
		p := e.pos
		if ids[p] < 0 || next[p] >= int32(n) {
			continue
		}
		q := next[p]
		r, id := b.pair(piece, int(p), end(p), ids[p], ids[q])
		if r != e.rank {
			continue
		}
		ids[p], ids[q] = id, -1
		next[p] = next[q]
		if next[p] < int32(n) {
			prev[next[p]] = p
			if r, _ := b.pair(piece, int(p), end(p), ids[p], ids[next[p]]); r != noRank {
				heap.Push(&h, mergeEntry{r, p})
			}
		}
		if pp := prev[p]; pp >= 0 {
			if r, _ := b.pair(piece, int(pp), end(pp), ids[pp], ids[p]); r != noRank {
				heap.Push(&h, mergeEntry{r, pp})
			}
		}
	}
	out := make([]int32, 0, n/2)
	for p := int32(0); p < int32(n); p = next[p] {
		out = append(out, ids[p])
	}
	return out
}
