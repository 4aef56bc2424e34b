package tokenizer

import (
	"sync"
	"unicode"
	"unicode/utf8"
)

// Pattern is a pre-tokenizer: it splits text into the pieces BPE merges
// within. Each one is a hand-written matcher equal to the regular
// expression of the same name (Go's regexp has no lookahead, which all of
// them use).
type Pattern int

// The pre-tokenizer patterns.
const (
	// PatternGPT2 is GPT-2's (r50k_base, p50k_base, HF ByteLevel):
	//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
	PatternGPT2 Pattern = iota + 1
	// PatternCL100K is cl100k_base's:
	//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
	PatternCL100K
	// PatternO200K is o200k_base's (see patO200K).
	PatternO200K
)

// The regular expressions of the patterns, as tiktoken and tokenizer.json
// files spell them.
const (
	patGPT2   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	patCL100K = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patO200K  = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// patternByRegex maps the regular expressions this package implements to
// their matchers.
var patternByRegex = map[string]Pattern{
	patGPT2:   PatternGPT2,
	patCL100K: PatternCL100K,
	patO200K:  PatternO200K,
}

// Character classes of a rune, as bits.
const (
	cLetter  = 1 << iota // \p{L}
	cNumber              // \p{N}
	cSpace               // \s
	cNewline             // \r or \n
	cUpper               // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
	cLower               // [\p{Ll}\p{Lm}\p{Lo}\p{M}]
)

var asciiClass [128]uint8

func init() {
	for r := rune(0); r < 128; r++ {
		asciiClass[r] = slowClass(r)
	}
}

func slowClass(r rune) uint8 {
	var c uint8
	switch {
	case unicode.IsLetter(r):
		c |= cLetter
	case unicode.IsNumber(r):
		c |= cNumber
	case unicode.IsSpace(r):
		c |= cSpace
	}
	if r == '\r' || r == '\n' {
		c |= cNewline
	}
	upper := unicode.In(r, unicode.Lu, unicode.Lt, unicode.Lm, unicode.Lo, unicode.M)
	lower := unicode.In(r, unicode.Ll, unicode.Lm, unicode.Lo, unicode.M)
	if upper {
		c |= cUpper
	}
	if lower {
		c |= cLower
	}
	return c
}

// bmpClass holds the class of every rune below U+10000, built on first
// use: looking the Unicode tables up per rune is several times slower.
var (
	bmpOnce  sync.Once
	bmpClass *[0x10000]uint8
)

func buildBMP() {
	t := new([0x10000]uint8)
	for r := range rune(0x10000) {
		t[r] = slowClass(r)
	}
	bmpClass = t
}

// classAt returns the class and byte length of the rune at s[i]. An
// invalid UTF-8 byte is one rune of its own with the class of U+FFFD (a
// symbol: neither letter, number nor space).
func classAt(s string, i int) (uint8, int) {
	b := s[i]
	if b < utf8.RuneSelf {
		return asciiClass[b], 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	if r < 0x10000 {
		bmpOnce.Do(buildBMP)
		return bmpClass[r], n
	}
	return slowClass(r), n
}

// isOther reports [^\s\p{L}\p{N}].
func isOther(c uint8) bool { return c&(cLetter|cNumber|cSpace) == 0 }

// isPrefix reports [^\r\n\p{L}\p{N}].
func isPrefix(c uint8) bool { return c&(cLetter|cNumber|cNewline) == 0 }

// next returns the end of the piece that starts at s[i] (i < len(s)).
func (p Pattern) next(s string, i int) int {
	switch p {
	case PatternCL100K:
		return nextCL100K(s, i)
	case PatternO200K:
		return nextO200K(s, i)
	}
	return nextGPT2(s, i)
}

// Split returns the pieces of text, in order; their concatenation is text.
func (p Pattern) Split(text string) []string {
	var out []string
	for i := 0; i < len(text); {
		j := p.next(text, i)
		out = append(out, text[i:j])
		i = j
	}
	return out
}

// contraction returns the length of 's|'t|'re|'ve|'m|'ll|'d at s[i] (0 if
// none); fold makes it case-insensitive as (?i) does, where ſ (U+017F)
// folds to s.
func contraction(s string, i int, fold bool) int {
	if i >= len(s) || s[i] != '\'' || i+1 >= len(s) {
		return 0
	}
	c := s[i+1]
	if fold {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		} else if c == 0xC5 && i+2 < len(s) && s[i+2] == 0xBF { // ſ
			return 3
		}
	}
	switch c {
	case 's', 't', 'm', 'd':
		return 2
	}
	if i+2 >= len(s) {
		return 0
	}
	d := s[i+2]
	if fold && d >= 'A' && d <= 'Z' {
		d += 'a' - 'A'
	}
	switch {
	case c == 'r' && d == 'e', c == 'v' && d == 'e', c == 'l' && d == 'l':
		return 3
	}
	return 0
}

// spanWhile returns the end of the run of runes from i whose class has a
// bit of mask.
func spanWhile(s string, i int, mask uint8) int {
	for i < len(s) {
		c, n := classAt(s, i)
		if c&mask == 0 {
			break
		}
		i += n
	}
	return i
}

// spanOther returns the end of the run of [^\s\p{L}\p{N}] from i.
func spanOther(s string, i int) int {
	for i < len(s) {
		c, n := classAt(s, i)
		if !isOther(c) {
			break
		}
		i += n
	}
	return i
}

// whitespace matches \s+(?!\S)|\s+ at s[i], which is a space.
func whitespace(s string, i int) int {
	// \s+ greedy, then back off one rune if a non-space follows, unless
	// that would leave nothing.
	j, last := i, i
	for j < len(s) {
		c, n := classAt(s, j)
		if c&cSpace == 0 {
			break
		}
		last = j
		j += n
	}
	if j < len(s) && last > i {
		return last
	}
	return j
}

// newlines matches \s*[\r\n]+ at s[i]: the whitespace run up to and
// including its last \r or \n; 0 if the run has none.
func newlines(s string, i int) int {
	end := 0
	for j := i; j < len(s); {
		c, n := classAt(s, j)
		if c&cSpace == 0 {
			break
		}
		j += n
		if c&cNewline != 0 {
			end = j
		}
	}
	return end
}

func nextGPT2(s string, i int) int {
	if n := contraction(s, i, false); n > 0 {
		return i + n
	}
	c, _ := classAt(s, i)
	start := i
	if s[i] == ' ' && i+1 < len(s) {
		c2, _ := classAt(s, i+1)
		if c2&cSpace == 0 {
			c, start = c2, i+1
		}
	}
	switch {
	case c&cLetter != 0:
		return spanWhile(s, start, cLetter)
	case c&cNumber != 0:
		return spanWhile(s, start, cNumber)
	case isOther(c):
		return spanOther(s, start)
	}
	return whitespace(s, i)
}

func nextCL100K(s string, i int) int {
	if n := contraction(s, i, true); n > 0 {
		return i + n
	}
	c, n := classAt(s, i)
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if isPrefix(c) && i+n < len(s) {
		if c2, _ := classAt(s, i+n); c2&cLetter != 0 {
			return spanWhile(s, i+n, cLetter)
		}
	}
	if c&cLetter != 0 {
		return spanWhile(s, i, cLetter)
	}
	// \p{N}{1,3}
	if c&cNumber != 0 {
		j := i + n
		for k := 0; k < 2 && j < len(s); k++ {
			c2, n2 := classAt(s, j)
			if c2&cNumber == 0 {
				break
			}
			j += n2
		}
		return j
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	if j := otherRun(s, i, c, n); j > 0 {
		return spanNewlines(s, j, false)
	}
	// \s*[\r\n]+
	if j := newlines(s, i); j > 0 {
		return j
	}
	return whitespace(s, i)
}

// otherRun matches ' ?[^\s\p{L}\p{N}]+' at s[i] (class c, length n); 0 if
// it does not match.
func otherRun(s string, i int, c uint8, n int) int {
	if s[i] == ' ' && i+1 < len(s) {
		if c2, _ := classAt(s, i+1); isOther(c2) {
			return spanOther(s, i+1)
		}
	}
	if isOther(c) {
		return spanOther(s, i+n)
	}
	return 0
}

// spanNewlines matches [\r\n]* (or [\r\n/]* with slash) at s[j].
func spanNewlines(s string, j int, slash bool) int {
	for j < len(s) && (s[j] == '\r' || s[j] == '\n' || (slash && s[j] == '/')) {
		j++
	}
	return j
}

func nextO200K(s string, i int) int {
	c, n := classAt(s, i)
	// Alternatives 1 and 2, each first with the optional prefix rune.
	if isPrefix(c) && i+n < len(s) {
		if j := o200kWord1(s, i+n); j > 0 {
			return j
		}
	}
	if j := o200kWord1(s, i); j > 0 {
		return j
	}
	if isPrefix(c) && i+n < len(s) {
		if j := o200kWord2(s, i+n); j > 0 {
			return j
		}
	}
	if j := o200kWord2(s, i); j > 0 {
		return j
	}
	if c&cNumber != 0 {
		j := i + n
		for k := 0; k < 2 && j < len(s); k++ {
			c2, n2 := classAt(s, j)
			if c2&cNumber == 0 {
				break
			}
			j += n2
		}
		return j
	}
	if j := otherRun(s, i, c, n); j > 0 {
		return spanNewlines(s, j, true)
	}
	if j := newlines(s, i); j > 0 {
		return j
	}
	return whitespace(s, i)
}

// o200kWord1 matches U*Lw+C? at s[i]; 0 if it does not match.
func o200kWord1(s string, i int) int {
	// U* greedy, remembering where the last rune that is also Lw ends: if
	// Lw+ cannot follow the run, backtracking ends the match there.
	j, lastLw := i, 0
	for j < len(s) {
		c, n := classAt(s, j)
		if c&cUpper == 0 {
			break
		}
		j += n
		if c&cLower != 0 {
			lastLw = j
		}
	}
	end := spanWhile(s, j, cLower)
	if end == j {
		if lastLw == 0 {
			return 0
		}
		end = lastLw
	}
	return end + contraction(s, end, true)
}

// o200kWord2 matches U+Lw*C? at s[i]; 0 if it does not match.
func o200kWord2(s string, i int) int {
	j := spanWhile(s, i, cUpper)
	if j == i {
		return 0
	}
	end := spanWhile(s, j, cLower)
	return end + contraction(s, end, true)
}
