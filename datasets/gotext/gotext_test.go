package gotext

import (
	"strings"
	"testing"

	"github.com/gotrain/gotrain/data/text"
)

func TestCorpusShipsWithItsLicense(t *testing.T) {
	c := Corpus()
	if len(c) < 300_000 {
		t.Fatalf("corpus of %d bytes, want a few hundred KB", len(c))
	}
	if err := text.Check(Name, []byte(c)); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(c, "// ---- go/src/strings/") || !strings.Contains(c, "// ---- go/src/container/list/list.go ----") {
		t.Fatalf("corpus does not start with strings or lacks container/list: %.60q", c)
	}
	if !strings.Contains(License(), "Copyright 2009 The Go Authors.") || !strings.Contains(License(), "Redistribution and use in source and binary forms") {
		t.Fatalf("license: %.80q", License())
	}
}
