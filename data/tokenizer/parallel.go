package tokenizer

import (
	"runtime"
	"sync"
)

// parallelMin is the text length below which EncodeParallel encodes on
// the calling goroutine.
const parallelMin = 64 << 10

// EncodeParallel encodes ordinary text like Encode, with the text split
// across workers goroutines (0 means GOMAXPROCS). It splits only where
// every supported pre-tokenizer must end a piece: before an ASCII letter
// that follows a newline, or at a space between two ASCII letters; so
// the ids equal Encode's. Text without such places is encoded on one
// goroutine.
func (b *BPE) EncodeParallel(text string, workers int) []int {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	if workers == 1 || len(text) < parallelMin {
		return b.Encode(text)
	}
	if b.addPrefixSpace && text[0] != ' ' {
		text = " " + text
	}
	chunks := splitSafe(text, workers*4)
	out := make([][]int, len(chunks))
	var wg sync.WaitGroup
	next := make(chan int, len(chunks))
	for i := range chunks {
		next <- i
	}
	close(next)
	for range min(workers, len(chunks)) {
		wg.Go(func() {
			for i := range next {
				out[i] = b.appendPlain(make([]int, 0, len(chunks[i])/3+1), chunks[i])
			}
		})
	}
	wg.Wait()
	n := 0
	for _, o := range out {
		n += len(o)
	}
	ids := make([]int, 0, n)
	for _, o := range out {
		ids = append(ids, o...)
	}
	return ids
}

// EncodeBatch encodes each text (ordinary text, as Encode) on workers
// goroutines (0 means GOMAXPROCS).
func (b *BPE) EncodeBatch(texts []string, workers int) [][]int {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	out := make([][]int, len(texts))
	next := make(chan int, len(texts))
	for i := range texts {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	for range min(workers, len(texts)) {
		wg.Go(func() {
			for i := range next {
				out[i] = b.Encode(texts[i])
			}
		})
	}
	wg.Wait()
	return out
}

// appendPlain appends the ids of text without the prefix space.
func (b *BPE) appendPlain(dst []int, text string) []int {
	for i := 0; i < len(text); {
		j := b.pattern.next(text, i)
		dst = b.appendPiece(dst, text[i:j])
		i = j
	}
	return dst
}

func isASCIILetter(c byte) bool { return (c|0x20) >= 'a' && (c|0x20) <= 'z' }

// splitSafe splits text into about n chunks at piece boundaries.
func splitSafe(text string, n int) []string {
	size := max(len(text)/n, 4<<10)
	var chunks []string
	for len(text) > size {
		k := safeBoundary(text, size)
		if k <= 0 {
			break
		}
		chunks = append(chunks, text[:k])
		text = text[k:]
	}
	return append(chunks, text)
}

// safeBoundary returns the first position at or after from where a piece
// must start, or -1.
func safeBoundary(s string, from int) int {
	for k := max(from, 1); k+1 < len(s); k++ {
		// A lone newline: GPT-2's \s+(?!\S) hands the last rune of a
		// longer whitespace run to the next piece, which a cut would not.
		if isASCIILetter(s[k]) && s[k-1] == '\n' && k >= 2 && isASCIIVisible(s[k-2]) {
			return k
		}
		if s[k] == ' ' && isASCIILetter(s[k-1]) && isASCIILetter(s[k+1]) {
			return k
		}
	}
	return -1
}

// isASCIIVisible reports whether b is a printable ASCII character other
// than the space.
func isASCIIVisible(b byte) bool { return b > ' ' && b < 0x7f }
