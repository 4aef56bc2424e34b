package auth

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/gotrain/gotrain/internal/logging"
)

// HandshakeTimeout bounds a server's side of one handshake, from accept to
// result: four small messages take milliseconds between live peers, and a
// client that connects and says nothing must not hold a descriptor and a
// goroutine for long.
const HandshakeTimeout = 5 * time.Second

// WarnInterval is how often a Limiter writes a summary of the warnings it
// held back.
const WarnInterval = 10 * time.Second

// Limiter writes warnings without letting a flood of them (a port scanner,
// a client holding hundreds of idle connections) flood the log: the first
// warning with a given message goes out at once; later ones within
// WarnInterval are counted and summarized in one line per interval, with
// the count and the last one's attributes. A Limiter is safe for
// concurrent use; its zero value is not usable, use NewLimiter.
type Limiter struct {
	log      *slog.Logger
	interval time.Duration

	mu    sync.Mutex
	held  map[string]*heldWarnings // by message, while its interval runs
	timer map[string]stopper
	// afterFunc starts an interval's timer: time.AfterFunc, or a test's
	// clock.
	afterFunc func(d time.Duration, f func()) stopper
}

// stopper is a started timer.
type stopper interface{ Stop() bool }

func afterFunc(d time.Duration, f func()) stopper { return time.AfterFunc(d, f) }

type heldWarnings struct {
	count int
	last  []any
}

// NewLimiter returns a Limiter writing to log (nil: logging.Default() at each
// write) with one summary per interval (0: WarnInterval).
func NewLimiter(log *slog.Logger, interval time.Duration) *Limiter {
	if interval <= 0 {
		interval = WarnInterval
	}
	return &Limiter{log: log, interval: interval, held: map[string]*heldWarnings{}, timer: map[string]stopper{}, afterFunc: afterFunc}
}

// Warn logs msg with args, or counts it if msg was logged within the
// current interval.
func (l *Limiter) Warn(msg string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if h := l.held[msg]; h != nil {
		h.count++
		h.last = args
		return
	}
	l.held[msg] = &heldWarnings{}
	l.timer[msg] = l.afterFunc(l.interval, func() { l.flush(msg) })
	l.logger().Warn(msg, args...)
}

// flush writes the summary of msg's interval, and keeps holding msg for
// another interval if any were held back (so a steady flood gives one line
// per interval).
func (l *Limiter) flush(msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.held[msg]
	if h == nil {
		return
	}
	if h.count == 0 {
		delete(l.held, msg)
		delete(l.timer, msg)
		return
	}
	l.summarize(msg, h)
	l.held[msg] = &heldWarnings{}
	l.timer[msg] = l.afterFunc(l.interval, func() { l.flush(msg) })
}

// Stop writes the summaries held back so far and stops the timers.
func (l *Limiter) Stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for msg, h := range l.held {
		l.timer[msg].Stop()
		if h.count > 0 {
			l.summarize(msg, h)
		}
		delete(l.held, msg)
		delete(l.timer, msg)
	}
}

// summarize writes the one line that stands for h's held warnings.
func (l *Limiter) summarize(msg string, h *heldWarnings) {
	args := append([]any{"repeated", h.count, "in", l.interval}, h.last...)
	l.logger().Warn(msg+" (repeated; details of the last)", args...)
}

func (l *Limiter) logger() *slog.Logger {
	if l.log != nil {
		return l.log
	}
	return logging.Default()
}

// refusals summarizes this package's own warnings about refused
// connections, shared by every listener of the process.
var refusals = NewLimiter(nil, 0)

// Gate bounds the connections of one listener that have not finished
// their handshake. Each holds a file descriptor, and a client that opens
// hundreds of connections and says nothing must not use up the process's
// descriptors (a checkpoint being written needs some): past the bound, a
// new connection is closed at once, and counted in one summary warning
// per interval. No one remote host may hold more than half the slots, so
// a flood from one host leaves room for the others. A Gate is safe for
// concurrent use.
type Gate struct {
	slots chan struct{}
	warn  *Limiter
	what  string

	mu     sync.Mutex // guards byHost
	byHost map[string]int
}

// NewGate returns a Gate admitting at most max handshakes at once (0:
// MaxPendingHandshakes()), whose warnings about closed connections (see
// Admit) name the listener as what ("store", "tcp") and go to warn (nil:
// none).
func NewGate(what string, max int, warn *Limiter) *Gate {
	if max <= 0 {
		max = MaxPendingHandshakes()
	}
	return &Gate{slots: make(chan struct{}, max), warn: warn, what: what, byHost: map[string]int{}}
}

// Admit reports whether c may start its handshake; the caller then calls
// done when the handshake ends. If too many are in progress, in all or
// from c's host, it closes c and reports false: for a listener whose
// clients retry (the store's do).
func (g *Gate) Admit(c net.Conn) (done func(), ok bool) {
	host := c.RemoteAddr().String()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	perHost := max(1, cap(g.slots)/2)
	g.mu.Lock()
	if g.byHost[host] < perHost {
		select {
		case g.slots <- struct{}{}:
			g.byHost[host]++
			ok = true
		default:
		}
	}
	g.mu.Unlock()
	if ok {
		return func() {
			g.mu.Lock()
			if g.byHost[host]--; g.byHost[host] == 0 {
				delete(g.byHost, host)
			}
			g.mu.Unlock()
			<-g.slots
		}, true
	}
	c.Close()
	if g.warn != nil {
		g.warn.Warn(g.what+": closed a new connection: too many connections are still in their handshake",
			"limit", cap(g.slots), "per_host", perHost, "remote", c.RemoteAddr().String())
	}
	return nil, false
}

// Enter waits for a free slot, for a listener whose clients are all
// expected (a rendezvous, where each peer dials once and does not retry a
// dropped handshake): the caller calls Enter before Accept, so connections
// beyond the bound wait in the kernel's backlog, holding no descriptor of
// this process, instead of being closed. It reports false if ctx ended
// first; otherwise the caller calls Done when the handshake ends.
func (g *Gate) Enter(ctx context.Context) bool {
	select {
	case g.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// Done frees the slot Enter took, once its handshake ended.
func (g *Gate) Done() { <-g.slots }

// MaxPendingHandshakes is the default bound of a Gate: an eighth of the
// process's file-descriptor limit, between 4 and 64, so that seven eighths
// stay free for the job itself whatever a flood of connections does.
func MaxPendingHandshakes() int {
	n := fdLimit() / 8
	return min(max(n, 4), 64)
}
