package kernels

import "testing"

func TestParseCacheSize(t *testing.T) {
	for s, want := range map[string]int{"512K": 512 << 10, "2048K": 2 << 20, "2M": 2 << 20, "1024": 1024, "": 0, "big": 0, "-1K": 0} {
		if got := parseCacheSize(s); got != want {
			t.Errorf("parseCacheSize(%q) = %d, want %d", s, got, want)
		}
	}
	if n := L2CacheBytes(); n < 64<<10 || n > 1<<30 {
		t.Errorf("L2CacheBytes() = %d, not a plausible L2 size", n)
	}
}
