package ddp

import (
	"context"
	"testing"
)

// BenchmarkCompressionHooks times the hooks on one rank over the MLP's
// 669,706 gradients (conversion and packing; no network).
func BenchmarkCompressionHooks(b *testing.B) {
	bucket := make([]float32, 669706)
	for i := range bucket {
		bucket[i] = float32(i%1000) * 1e-4
	}
	for _, h := range []struct {
		name string
		hook CommHook
	}{{"allreduce", AllReduceHook}, {"fp16", FP16CompressHook}, {"bf16", BF16CompressHook}} {
		b.Run(h.name, func(b *testing.B) {
			g := newLocalGroups(1)[0]
			for b.Loop() {
				if err := h.hook(context.Background(), g, bucket); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
