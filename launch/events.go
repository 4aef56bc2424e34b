package launch

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gotrain/gotrain/event"
)

// maxEvent is the longest event line delivered; a longer one is dropped,
// since a cut JSON line is no event.
const maxEvent = 64 << 10

// serialEvents wraps fn so that calls from the workers' pumps never
// overlap; nil stays nil.
func serialEvents(fn func(rank int, line []byte)) func(rank int, line []byte) {
	if fn == nil {
		return nil
	}
	var mu sync.Mutex
	return func(rank int, line []byte) {
		mu.Lock()
		defer mu.Unlock()
		fn(rank, line)
	}
}

// pumpEvents passes each line of r to deliver until EOF, a read error or
// r's closing, as pumpLines does for output, and copies r to file if it
// is not nil.
func pumpEvents(r io.Reader, rank int, deliver func(rank int, line []byte), file *os.File) {
	if file != nil {
		r = io.TeeReader(r, errorless{file})
	}
	br := bufio.NewReaderSize(r, maxEvent)
	tooLong := false
	for {
		line, err := br.ReadSlice('\n')
		switch {
		case err == bufio.ErrBufferFull:
			tooLong = true
			continue
		case tooLong:
			tooLong = false // the end of a dropped line
		case len(bytes.TrimSpace(line)) > 0 && (err == nil || err == io.EOF):
			deliver(rank, bytes.TrimRight(line, "\r\n"))
		}
		if err != nil {
			return
		}
	}
}

// createEventsLog creates the worker's events.jsonl in logDir, or returns
// nil without a log directory.
func createEventsLog(logDir string, localRank int) (*os.File, error) {
	if logDir == "" {
		return nil, nil
	}
	return os.Create(filepath.Join(logDir, strconv.Itoa(localRank), "events.jsonl"))
}

// errorless hides write errors: a full disk must not stop the events
// reaching the console.
type errorless struct{ w io.Writer }

func (e errorless) Write(p []byte) (int, error) {
	_, _ = e.w.Write(p)
	return len(p), nil
}

// withoutEventsFD removes an inherited GOTRAIN_EVENTS_FD: it names a
// descriptor of the launcher's own launcher, not one its workers have.
func withoutEventsFD(env []string) []string {
	if !slices.ContainsFunc(env, isEventsFD) {
		return env
	}
	return slices.DeleteFunc(slices.Clone(env), isEventsFD)
}

func isEventsFD(kv string) bool { return strings.HasPrefix(kv, event.EnvFD+"=") }
