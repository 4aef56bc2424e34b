package text

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestByteTokenizerRoundTrip(t *testing.T) {
	var tok ByteTokenizer
	s := "func main() { fmt.Println(\"héllo, 世界\") }\n"
	ids := tok.Encode(s)
	if len(ids) != len(s) || ids[0] != 'f' || tok.VocabSize() != 256 {
		t.Fatalf("Encode: %v", ids[:4])
	}
	back, err := tok.Decode(ids)
	if err != nil || back != s {
		t.Fatalf("Decode = %q, %v", back, err)
	}
}

func TestDecodeOutOfRange(t *testing.T) {
	_, err := ByteTokenizer{}.Decode([]int{104, 105, 300})
	if err == nil || err.Error() != "text: token id 300 at position 2 is outside the vocabulary of size 256" {
		t.Fatalf("err = %v", err)
	}
}

func TestPrintable(t *testing.T) {
	if got := Printable("ab\xe4\xb8"); got != "ab\uFFFD" {
		t.Fatalf("Printable = %q", got)
	}
}

func TestReadCorpusRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	empty := write("empty.txt", nil)
	latin1 := write("latin1.txt", []byte("caf\xe9 au lait"))
	good := write("good.txt", []byte("package main\n"))
	for _, c := range []struct{ path, want string }{
		{empty, "text: bad corpus: " + empty + " is empty"},
		{latin1, "text: bad corpus: " + latin1 + " is not UTF-8 text (invalid byte 0xe9 at offset 3)"},
		{filepath.Join(dir, "missing.txt"), "no such file"},
	} {
		_, err := ReadCorpus(c.path)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.path, err, c.want)
		}
		if c.path != filepath.Join(dir, "missing.txt") && !errors.Is(err, ErrCorpus) {
			t.Errorf("%s: %v does not wrap ErrCorpus", c.path, err)
		}
	}
	if s, err := ReadCorpus(good); err != nil || s != "package main\n" {
		t.Fatalf("good corpus: %q, %v", s, err)
	}
}
