package console

import (
	"bytes"
	"encoding/json"
)

// kindPrefix starts every line progress.Event encodes (Kind is its first
// field).
var kindPrefix = []byte(`{"kind":"`)

// EventKind returns the kind an event line claims ("" if it is not an
// event) without decoding or checking the rest, which the line's consumer
// does: the launcher reads every line of every rank, and most are rows
// and spans that only one consumer wants.
func EventKind(line []byte) string {
	if rest, ok := bytes.CutPrefix(line, kindPrefix); ok {
		if i := bytes.IndexByte(rest, '"'); i >= 0 && bytes.IndexByte(rest[:i], '\\') < 0 {
			return string(rest[:i])
		}
	}
	var ev struct {
		Kind string `json:"kind"`
	}
	if json.Unmarshal(line, &ev) != nil {
		return ""
	}
	return ev.Kind
}
