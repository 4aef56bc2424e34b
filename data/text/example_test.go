package text_test

import (
	"fmt"

	"github.com/gotrain/gotrain/data"
	"github.com/gotrain/gotrain/data/text"
)

// A corpus becomes windows of four tokens whose targets are the next
// tokens, batched two at a time.
func Example() {
	tok := text.ByteTokenizer{}
	ds, err := data.NewTokenWindows(tok.Encode("hello, gopher"), tok.VocabSize(), 4, 4)
	if err != nil {
		panic(err)
	}
	loader := data.NewSequenceLoader(ds, 2, data.NewSequentialSampler(ds.Len()))
	for b := range loader.Batches() {
		for i := range b.Len() {
			x, _ := tok.Decode(b.Inputs[i*b.T : (i+1)*b.T])
			y, _ := tok.Decode(b.Targets[i*b.T : (i+1)*b.T])
			fmt.Printf("%q -> %q\n", x, y)
		}
	}
	// Output:
	// "hell" -> "ello"
	// "o, g" -> ", go"
	// "ophe" -> "pher"
}
