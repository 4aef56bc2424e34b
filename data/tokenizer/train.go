package tokenizer

import (
	"container/heap"
	"context"
	"fmt"
	"iter"
	"slices"
)

// TrainOptions tunes Train.
type TrainOptions struct {
	// Pattern is the pre-tokenizer; zero means PatternGPT2 (HF ByteLevel).
	Pattern Pattern
	// MinFrequency stops training when the most frequent pair occurs fewer
	// times; zero means 2.
	MinFrequency int
	// Progress, if set, is called after counting words (merges 0) and
	// then every few hundred merges.
	Progress func(merges, target int)
}

// Train learns a byte-level BPE of vocabSize ids (special tokens and the
// 256 bytes included) from texts with the default options; see TrainWith.
func Train(ctx context.Context, texts iter.Seq[string], vocabSize int, specials []string) (*BPE, error) {
	return TrainWith(ctx, texts, vocabSize, specials, TrainOptions{})
}

// TrainWith learns a byte-level BPE the way Hugging Face tokenizers'
// BpeTrainer does: texts are pre-tokenized and the pieces counted; ids
// are the special tokens, then the 256 bytes in the order of their
// printable (byte-level) characters, then one per merge; each step merges
// the most frequent adjacent pair in all pieces, the smallest pair of ids
// first on ties, until the vocabulary is full or no pair occurs
// MinFrequency times.
func TrainWith(ctx context.Context, texts iter.Seq[string], vocabSize int, specials []string, opt TrainOptions) (*BPE, error) {
	if opt.Pattern == 0 {
		opt.Pattern = PatternGPT2
	}
	if opt.MinFrequency <= 0 {
		opt.MinFrequency = 2
	}
	seen := map[string]bool{}
	for _, s := range specials {
		if s == "" || seen[s] {
			return nil, fmt.Errorf("tokenizer train: special token %q is empty or repeated", s)
		}
		seen[s] = true
	}
	base := len(specials) + 256
	if vocabSize < base {
		return nil, fmt.Errorf("tokenizer train: vocabulary size %d is below %d (the special tokens and 256 bytes)", vocabSize, base)
	}

	// Count the pieces.
	counts := map[string]int{}
	n := 0
	for text := range texts {
		for i := 0; i < len(text); {
			j := opt.Pattern.next(text, i)
			counts[text[i:j]]++
			i = j
		}
		if n++; n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("tokenizer train: %w", err)
			}
		}
	}

	// Ids: specials, then bytes by byte-level character.
	vocab := make([][]byte, base, vocabSize)
	order := make([]int, 256)
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return int(byteToRune[a] - byteToRune[b]) })
	var byteID [256]int32
	for k, c := range order {
		byteID[c] = int32(len(specials) + k)
		vocab[len(specials)+k] = []byte{byte(c)}
	}
	ids := make(map[string]int32, vocabSize)
	for id := len(specials); id < base; id++ {
		ids[string(vocab[id])] = int32(id)
	}

	// Words as symbol ids, in a fixed order so that training is
	// deterministic.
	keys := make([]string, 0, len(counts))
	for k := range counts {
		if len(k) > 1 {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	words := make([][]int32, len(keys))
	wcount := make([]int, len(keys))
	for w, k := range keys {
		sym := make([]int32, len(k))
		for i := 0; i < len(k); i++ {
			sym[i] = byteID[k[i]]
		}
		words[w], wcount[w] = sym, counts[k]
	}
	counts = nil

	pairCount := map[uint64]int{}
	where := map[uint64]map[int32]struct{}{}
	for w, sym := range words {
		for i := 0; i+1 < len(sym); i++ {
			p := pairKey(sym[i], sym[i+1])
			pairCount[p] += wcount[w]
			s := where[p]
			if s == nil {
				s = map[int32]struct{}{}
				where[p] = s
			}
			s[int32(w)] = struct{}{}
		}
	}
	q := make(pairQueue, 0, len(pairCount))
	for p, c := range pairCount {
		q = append(q, &pairEntry{pair: p, count: c, pos: where[p]})
	}
	heap.Init(&q)
	where = nil

	target := vocabSize - base
	if opt.Progress != nil {
		opt.Progress(0, target)
	}
	merges := make(map[uint64]uint64, target)
	var list [][2]int32
	size := base
	for size < vocabSize && q.Len() > 0 {
		if len(list)%256 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("tokenizer train: %w", err)
			}
		}
		top := heap.Pop(&q).(*pairEntry)
		if c := pairCount[top.pair]; c != top.count {
			top.count = c
			heap.Push(&q, top)
			continue
		}
		if top.count < opt.MinFrequency {
			break
		}
		a, b := int32(top.pair>>32), int32(uint32(top.pair))
		tok := slices.Concat(vocab[a], vocab[b])
		id, ok := ids[string(tok)]
		if !ok {
			id = int32(len(vocab))
			vocab = append(vocab, tok)
			ids[string(tok)] = id
			size++
		}
		if _, dup := merges[top.pair]; !dup {
			merges[top.pair] = uint64(len(list))<<32 | uint64(uint32(id))
		}
		list = append(list, [2]int32{a, b})
		if opt.Progress != nil && len(list)%500 == 0 {
			opt.Progress(len(list), target)
		}

		// Merge in every word that had the pair, recording the pairs that
		// disappear and the new ones.
		update := map[uint64]map[int32]struct{}{}
		ws := make([]int32, 0, len(top.pos))
		for w := range top.pos {
			ws = append(ws, w)
		}
		slices.Sort(ws)
		for _, w := range ws {
			words[w] = mergeWord(words[w], a, b, id, func(p uint64, delta int) {
				pairCount[p] += delta * wcount[w]
				if delta > 0 {
					s := update[p]
					if s == nil {
						s = map[int32]struct{}{}
						update[p] = s
					}
					s[w] = struct{}{}
				}
			})
		}
		for p, pos := range update {
			if c := pairCount[p]; c > 0 {
				heap.Push(&q, &pairEntry{pair: p, count: c, pos: pos})
			}
		}
	}
	if opt.Progress != nil {
		opt.Progress(len(list), target)
	}

	sp := make(map[string]int, len(specials))
	for i, s := range specials {
		sp[s] = i
	}
	bpe, err := newBPE("trained", opt.Pattern, vocab, merges, sp)
	if err != nil {
		return nil, err
	}
	bpe.mergeList = list
	// Keep the specials in their given order for saving.
	bpe.specialOrder = append([]string(nil), specials...)
	return bpe, nil
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// mergeWord replaces each occurrence of (a, b) in sym, left to right, by
// id, reporting each pair count change.
func mergeWord(sym []int32, a, b, id int32, change func(p uint64, delta int)) []int32 {
	for i := 0; i+1 < len(sym); i++ {
		if sym[i] != a || sym[i+1] != b {
			continue
		}
		if i > 0 {
			change(pairKey(sym[i-1], a), -1)
			change(pairKey(sym[i-1], id), 1)
		}
		sym[i] = id
		sym = append(sym[:i+1], sym[i+2:]...)
		if i+1 < len(sym) {
			change(pairKey(b, sym[i+1]), -1)
			change(pairKey(id, sym[i+1]), 1)
		}
	}
	return sym
}

// pairEntry is a candidate merge; count may be stale (then it is larger
// than the pair's count) and is refreshed when popped.
type pairEntry struct {
	pair  uint64
	count int
	pos   map[int32]struct{}
}

// pairQueue is a max-heap by count, then smallest pair.
type pairQueue []*pairEntry

func (q pairQueue) Len() int { return len(q) }
func (q pairQueue) Less(i, j int) bool {
	if q[i].count != q[j].count {
		return q[i].count > q[j].count
	}
	return q[i].pair < q[j].pair
}
func (q pairQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *pairQueue) Push(x any)   { *q = append(*q, x.(*pairEntry)) }
func (q *pairQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}
