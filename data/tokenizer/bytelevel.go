package tokenizer

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// byteToRune is GPT-2's byte↔unicode map: printable Latin-1 bytes map to
// themselves, the rest to U+0100 upwards in byte order, so that every
// token is printable text in vocab.json and tokenizer.json.
var (
	byteToRune [256]rune
	runeToByte = map[rune]byte{}
)

func init() {
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = rune(256 + n)
			n++
		}
		runeToByte[byteToRune[b]] = byte(b)
	}
}

// byteLevelEncode returns the printable form of token bytes.
func byteLevelEncode(tok []byte) string {
	var sb strings.Builder
	for _, c := range tok {
		sb.WriteRune(byteToRune[c])
	}
	return sb.String()
}

// byteLevelDecode returns the bytes of a printable token.
func byteLevelDecode(s string) ([]byte, error) {
	out := make([]byte, 0, len(s))
	for _, r := range s {
		b, ok := runeToByte[r]
		if !ok {
			if r == utf8.RuneError {
				return nil, fmt.Errorf("token %q is not valid UTF-8", s)
			}
			return nil, fmt.Errorf("token %q has %q, which is not in the byte-level alphabet", s, r)
		}
		out = append(out, b)
	}
	return out, nil
}
