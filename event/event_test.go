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

func TestSummaryLine(t *testing.T) {
	var s Summary
	s.Add("model", "%s", "mlp")
	s.Add("world", "%d", 2)
	s.Add("test_acc", "%.4f", 0.97654)
	if got, want := s.Line(), "model=mlp world=2 test_acc=0.9765"; got != want {
		t.Errorf("Line() = %q, want %q", got, want)
	}
}
