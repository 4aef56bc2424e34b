package launch

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// With JSON logs every console line is a JSON object naming the rank in a
// field, whatever the worker wrote.
func TestPumpJSONLines(t *testing.T) {
	long := strings.Repeat("z", maxLine+10)
	record := `{"time":"2026-12-04T10:00:00Z","level":"INFO","msg":"distributed: advertising address","address":"127.0.0.1"}`
	in := record + "\n" +
		`{"level":"WARN","msg":"own rank","rank":5}` + "\n" +
		"plain print\n" +
		"10%\r100%\r\n" +
		"\n" +
		"{}\n" +
		"{not json\n" +
		"bad utf8 \xff\n" +
		long + "\n" +
		"tail"
	r, w := io.Pipe()
	go func() {
		for s := in; len(s) > 0; {
			n := min(len(s), 7)
			w.Write([]byte(s[:n]))
			s = s[n:]
		}
		w.Close()
	}()
	var console writeRecorder
	var file bytes.Buffer
	pumpJSONLines(r, 3, "stderr", &console, &file)
	if file.String() != in {
		t.Errorf("file got %d bytes, want the %d raw bytes", file.Len(), len(in))
	}
	var msgs []string
	for l := range strings.Lines(strings.Join(console.writes, "")) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil || !strings.HasSuffix(l, "\n") {
			t.Fatalf("console line %.80q is not one JSON object: %v", l, err)
		}
		want := 3.0
		if rec["msg"] == "own rank" {
			want = 5
		}
		if rec["rank"] != want {
			t.Errorf("line %.80q: rank %v, want %v", l, rec["rank"], want)
		}
		msg, _ := rec["msg"].(string) // "{}" has none
		msgs = append(msgs, msg)
		if rec["msg"] == "plain print" && (rec["stream"] != "stderr" || rec["level"] != "INFO" || rec["time"] == nil) {
			t.Errorf("wrapped line %q lacks its stream, level or time", l)
		}
	}
	wantMsgs := []string{"distributed: advertising address", "own rank", "plain print", "10%", "100%", "", "", "{not json",
		"bad utf8 \ufffd", long[:maxLine], long[maxLine:], "tail"}
	if len(msgs) != len(wantMsgs) {
		t.Fatalf("%d records %.200q, want %d", len(msgs), msgs, len(wantMsgs))
	}
	for i := range msgs {
		if msgs[i] != wantMsgs[i] {
			t.Errorf("record %d: msg %.60q, want %.60q", i, msgs[i], wantMsgs[i])
		}
	}
	if got := console.writes[0]; !strings.HasPrefix(got, `{"rank":3,"time":"2026-12-04T10:00:00Z"`) {
		t.Errorf("worker's record became %.100q, want its fields after the rank", got)
	}
}

func TestWorkerLogFormat(t *testing.T) {
	if got := workerLogFormat([]string{"GOTRAIN_LOG_FORMAT=text", "X=1", "GOTRAIN_LOG_FORMAT=json"}); got != "json" {
		t.Errorf("last value wins: got %q", got)
	}
	if got := workerLogFormat([]string{"GOTRAIN_LOG_FORMATX=json"}); got != "" {
		t.Errorf("another variable: got %q", got)
	}
}
