package tokenizer_test

import (
	"context"
	"fmt"
	"slices"

	"github.com/gotrain/gotrain/data/tokenizer"
)

func ExampleLoad() {
	tok, err := tokenizer.Load("gpt2")
	if err != nil {
		fmt.Println(err)
		return
	}
	ids := tok.Encode("Hello world")
	text, _ := tok.Decode(ids)
	eot, _ := tok.EndOfText()
	fmt.Println(ids, text, eot, tok.VocabSize())
	// Output: [15496 995] Hello world 50256 50257
}

func ExampleBPE_EncodeWithSpecial() {
	enc, err := tokenizer.Builtin("cl100k_base")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(enc.Encode("hi<|endoftext|>"))
	fmt.Println(enc.EncodeWithSpecial("hi<|endoftext|>", []string{"<|endoftext|>"}))
	// Output:
	// [6151 27 91 8862 728 428 91 29]
	// [6151 100257]
}

func ExampleTrain() {
	texts := []string{"low lower lowest", "new newer newest", "low new"}
	bpe, err := tokenizer.Train(context.Background(), slices.Values(texts), 256+1+6, []string{"<|endoftext|>"})
	if err != nil {
		fmt.Println(err)
		return
	}
	ids := bpe.Encode("lowest newer")
	fmt.Println(len(ids), bpe.VocabSize())
	// Output: 6 263
}
