package gptjob

import (
	"math"

	"github.com/gotrain/gotrain/tensor"
)

// sampleLogits draws an index from softmax(logits/temperature), using
// probs (len(logits)) as scratch; temperature 0 takes the most likely.
func sampleLogits(logits []float32, temperature float64, probs []float64, rng *tensor.RNG) int {
	best := 0
	for i, v := range logits {
		if v > logits[best] {
			best = i
		}
	}
	if temperature <= 0 {
		return best
	}
	var sum float64
	for i, v := range logits {
		probs[i] = math.Exp((float64(v) - float64(logits[best])) / temperature)
		sum += probs[i]
	}
	u := float64(rng.Float32()) * sum
	for i, p := range probs[:len(logits)] {
		if u -= p; u < 0 {
			return i
		}
	}
	return best // u was within rounding of sum
}
