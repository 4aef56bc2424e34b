package event

import "testing"

func TestKindOf(t *testing.T) {
	for line, want := range map[string]string{
		`{"kind":"step","rank":0,"epoch":1}`:      "step",
		`{"kind":"metrics","rank":1,"data":[{}]}`: "metrics",
		`{"rank":1,"kind":"done"}`:                "done", // not first: decoded
		`{"kind":"a\"b","rank":1}`:                `a"b`,
		`{"kind":"trace"`:                         "trace", // claimed; its consumer checks the rest
		`not json`:                                "",
		`{"rank":1}`:                              "",
	} {
		if got := KindOf([]byte(line)); got != want {
			t.Errorf("KindOf(%s) = %q, want %q", line, got, want)
		}
	}
}
