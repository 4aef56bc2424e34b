package launch

import (
	"bytes"
	"io"
	"strings"
	"sync"
	"testing"
)

// writeRecorder records each Write call separately.
type writeRecorder struct{ writes []string }

func (w *writeRecorder) Write(p []byte) (int, error) {
	w.writes = append(w.writes, string(p))
	return len(p), nil
}

func TestPumpLines(t *testing.T) {
	long := strings.Repeat("z", 2*maxLine+10)
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{"empty", "", nil},
		{"lines", "a\nbb\n", []string{"[r]: a\n", "[r]: bb\n"}},
		{"unterminated tail", "a\ntail", []string{"[r]: a\n", "[r]: tail\n"}},
		{"empty lines", "\n\n", []string{"[r]: \n", "[r]: \n"}},
		{"carriage return ends a line", "10%\r20%\r100%\n", []string{"[r]: 10%\r", "[r]: 20%\r", "[r]: 100%\n"}},
		{"crlf", "a\r\nb\r\n\r\n", []string{"[r]: a\r", "\n", "[r]: b\r", "\n", "[r]: \r", "\n"}},
		{"lone newline after text", "a\n\n", []string{"[r]: a\n", "[r]: \n"}},
		{"long line cut in pieces", long + "\nend\n", []string{
			"[r]: " + long[:maxLine] + "\n", "[r]: " + long[maxLine:2*maxLine] + "\n", "[r]: " + long[2*maxLine:] + "\n", "[r]: end\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var console writeRecorder
			var file bytes.Buffer
			// iotest-style one-byte reads would be slow for the long case;
			// a pipe with small writes exercises partial reads instead.
			r, w := io.Pipe()
			go func() {
				for s := tc.in; len(s) > 0; {
					n := min(len(s), 7)
					w.Write([]byte(s[:n]))
					s = s[n:]
				}
				w.Close()
			}()
			pumpLines(r, "[r]: ", &console, &file)
			got := strings.Join(console.writes, "")
			if want := strings.Join(tc.want, ""); got != want {
				t.Errorf("console got %.60q..., want %.60q...", got, want)
			}
			for _, w := range console.writes {
				if !strings.HasSuffix(w, "\n") && !strings.HasSuffix(w, "\r") {
					t.Errorf("write %.60q does not end a line", w)
				}
			}
			if file.String() != tc.in {
				t.Errorf("file got %d bytes, want the %d raw bytes", file.Len(), len(tc.in))
			}
		})
	}
}

// failingWriter fails every write, as a closed console would.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, io.ErrClosedPipe }

// TestPumpLinesKeepsDraining: a console that fails must not stop the copy,
// or a worker would block on a full pipe.
func TestPumpLinesKeepsDraining(t *testing.T) {
	var file bytes.Buffer
	in := strings.Repeat("line\n", 10000)
	pumpLines(strings.NewReader(in), "[r]: ", failingWriter{}, &file)
	if file.String() != in {
		t.Errorf("log file got %d bytes, want %d", file.Len(), len(in))
	}
}

// TestLockedWriterWholeLines: lines from concurrent pumps sharing a mutex
// arrive whole.
func TestLockedWriterWholeLines(t *testing.T) {
	var mu sync.Mutex
	var out writeRecorder
	var wg sync.WaitGroup
	for _, p := range []string{"[a]: ", "[b]: ", "[c]: "} {
		wg.Go(func() {
			pumpLines(strings.NewReader(strings.Repeat("0123456789\n", 500)), p, lockedWriter{&mu, &out}, nil)
		})
	}
	wg.Wait()
	lines := 0
	for _, w := range out.writes {
		for l := range strings.Lines(w) {
			if len(l) != 16 || l[5:] != "0123456789\n" {
				t.Fatalf("torn line %q", l)
			}
			lines++
		}
	}
	if lines != 1500 {
		t.Errorf("%d lines, want 1500", lines)
	}
}
