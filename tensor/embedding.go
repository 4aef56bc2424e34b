package tensor

import "fmt"

// Embedding returns the rows of weight [V, D] picked by the token ids, in
// a tensor of shape [shape..., D] (shape's product must be len(ids)),
// PyTorch's F.embedding. The gradient scatter-adds each output row into
// the row of its id, so repeated ids accumulate. An id outside [0, V)
// panics naming the id and the vocabulary size: validate untrusted input
// first (see CheckIDs).
func Embedding(weight *Tensor, ids []int, shape ...int) *Tensor {
	if weight.Dim() != 2 {
		panic(fmt.Sprintf("tensor: Embedding: weight %v is not [vocab, dim]", weight.shape))
	}
	if n := numel(shape); n != len(ids) {
		panic(fmt.Sprintf("tensor: Embedding: %d ids do not fill shape %v (%d)", len(ids), shape, n))
	}
	vocab, d := weight.shape[0], weight.shape[1]
	if err := CheckIDs(ids, vocab); err != nil {
		panic("tensor: Embedding: " + err.Error())
	}
	ids = append([]int(nil), ids...) // the caller may reuse its slice
	out := &Tensor{data: getBuf(len(ids) * d), shape: append(append([]int(nil), shape...), d)}
	for i, id := range ids {
		copy(out.data[i*d:(i+1)*d], weight.data[id*d:(id+1)*d])
	}
	return record(out, "embedding", func(g []float32) {
		gw := weight.accGrad()
		for i, id := range ids {
			addTo(gw[id*d:(id+1)*d], g[i*d:(i+1)*d])
		}
	}, weight)
}

// CheckIDs returns an error naming the first id outside [0, vocab) and the
// vocabulary size, or nil when every id is in range.
func CheckIDs(ids []int, vocab int) error {
	for i, id := range ids {
		if id < 0 || id >= vocab {
			return fmt.Errorf("token id %d at position %d is out of range for vocabulary size %d", id, i, vocab)
		}
	}
	return nil
}
