package launch

import (
	"bufio"
	"bytes"
	"io"
	"slices"
	"strings"
	"sync"
)

// eventsFDEnv names the worker's events pipe descriptor; it is
// progress.EnvFD (launch does not import the renderer's side).
const eventsFDEnv = "GOTRAIN_EVENTS_FD"

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
// r's closing, as pumpLines does for output.
func pumpEvents(r io.Reader, rank int, deliver func(rank int, line []byte)) {
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

// withoutEventsFD removes an inherited GOTRAIN_EVENTS_FD: it names a
// descriptor of the launcher's own launcher, not one its workers have.
func withoutEventsFD(env []string) []string {
	if !slices.ContainsFunc(env, isEventsFD) {
		return env
	}
	return slices.DeleteFunc(slices.Clone(env), isEventsFD)
}

func isEventsFD(kv string) bool { return strings.HasPrefix(kv, eventsFDEnv+"=") }
