package logging

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestNewFormats(t *testing.T) {
	var text, js bytes.Buffer
	New(&text, "").Info("hello", "k", 1)
	New(&js, JSON).Info("hello", "k", 1)
	if !strings.Contains(text.String(), "level=INFO msg=hello k=1") {
		t.Errorf("text record %q", text.String())
	}
	var rec map[string]any
	if err := json.Unmarshal(js.Bytes(), &rec); err != nil || rec["msg"] != "hello" || rec["k"] != 1.0 {
		t.Errorf("json record %q: %v", js.String(), err)
	}
}

func TestCheckFormat(t *testing.T) {
	for _, f := range []string{"", Text, JSON} {
		if err := CheckFormat(f); err != nil {
			t.Errorf("CheckFormat(%q) = %v", f, err)
		}
	}
	if err := CheckFormat("xml"); err == nil || !strings.Contains(err.Error(), `"xml"`) {
		t.Errorf("CheckFormat(xml) = %v, want an error naming it", err)
	}
}

// TestFromEnv: a worker's records are in the launcher's format and carry
// its rank; an unknown format falls back to text with a warning.
func TestFromEnv(t *testing.T) {
	t.Setenv(EnvFormat, JSON)
	t.Setenv("RANK", "3")
	var b bytes.Buffer
	FromEnv(&b, "").Info("x")
	var rec map[string]any
	if err := json.Unmarshal(b.Bytes(), &rec); err != nil || rec["rank"] != 3.0 {
		t.Fatalf("record %q: %v; want JSON with rank 3", b.String(), err)
	}
	// A record naming this rank again says it once; another rank stays.
	t.Setenv(EnvFormat, Text)
	b.Reset()
	l := FromEnv(&b, "")
	l.Info("same", "rank", 3, "k", 1)
	l.Info("peer", "rank", 5)
	if got := b.String(); strings.Count(got, "rank=3") != 2 || !strings.Contains(got, "msg=same rank=3 k=1\n") ||
		!strings.Contains(got, "msg=peer rank=3 rank=5\n") {
		t.Fatalf("records %q; want rank=3 once on each, and the peer's rank=5 kept", got)
	}
	t.Setenv(EnvFormat, JSON)

	t.Setenv(EnvFormat, "xml")
	t.Setenv("RANK", "")
	b.Reset()
	FromEnv(&b, "").Info("x")
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	b.Reset()
	FromEnv(&b, JSON).Info("y") // the flag's format wins
	if err := json.Unmarshal(b.Bytes(), &rec); err != nil || rec["msg"] != "y" {
		t.Fatalf("record %q: %v; want JSON", b.String(), err)
	}
	if len(lines) != 2 || !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], `\"xml\"`) ||
		!strings.Contains(lines[1], "msg=x") || strings.Contains(b.String(), "rank=") {
		t.Fatalf("records %q; want a text warning naming xml, then the record, no rank", b.String())
	}
}

func TestNewPanicsOnUnknownFormat(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), `logging: New: unknown log format "xml"`) {
			t.Errorf("recover() = %v", r)
		}
	}()
	New(&bytes.Buffer{}, "xml")
}
