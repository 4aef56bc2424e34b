package launch

import (
	"strings"
	"testing"
)

func TestRandomRunIDIsUUIDv4(t *testing.T) {
	a, b := randomRunID(), randomRunID()
	if a == b || len(a) != 36 || a[14] != '4' || !strings.ContainsAny(a[19:20], "89ab") {
		t.Errorf("run ids %q, %q", a, b)
	}
}
