// Package auth is the versioned, mutually authenticated handshake every
// gotrain connection starts with, on the store and on the data plane.
//
// Both ends share a token (the launcher makes a random one per job and hands
// it to its workers in GOTRAIN_TOKEN). Each end sends a fresh random nonce;
// the client proves it knows the token with HMAC-SHA256 over both nonces and
// its Hello, then the server proves the same over both nonces and both
// Hellos. Because each side's proof covers a nonce the other side chose, a
// recorded handshake cannot be replayed. The token itself never crosses the
// wire.
//
// The exchange is four small messages:
//
//	client → server  clientHello  magic, protocol version, client nonce
//	server → client  challenge    protocol version, status, server nonce
//	client → server  proof        HMAC(token, client label|cn|sn|hello), Hello
//	server → client  result       ok + HMAC(token, server label|cn|sn|hellos) + Hello,
//	                              or a refusal with a short reason
//
// Every message is a length-prefixed frame of at most MaxMessageSize bytes,
// so a malicious peer cannot make either side allocate more than that.
//
// An empty token on both sides is accepted (the HMAC is then keyed with the
// empty key); it keeps a single-machine experiment simple but authenticates
// nothing. The launcher always generates a random token.
package auth

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// ProtocolVersion is the gotrain wire protocol version. Peers with different
// versions refuse each other, naming both versions.
const ProtocolVersion = 2 // 2: heartbeat frames on the data plane

// Roles of a connection. A server refuses a peer whose role differs from
// its own, so a store client cannot land on a data-plane listener.
const (
	RoleStore = "store"
	RoleData  = "data"
)

// MaxJobIDLen is the longest JobID (and Role) a Hello may carry.
const MaxJobIDLen = 255

// Hello is what each end tells the other about itself.
type Hello struct {
	// Version is the protocol version. Leave it zero: Client and Server fill
	// it with ProtocolVersion. A nonzero value is sent as is, which lets
	// tests exercise a version mismatch.
	Version int
	// Role is RoleStore or RoleData.
	Role string
	// JobID names the job; servers usually refuse other jobs in accept.
	JobID string
	// Rank and WorldSize of the sender; -1 where it has none (a standalone
	// store server).
	Rank, WorldSize int
}

// Sentinel errors; match them with errors.Is.
var (
	// ErrAuth means a side does not know the shared token.
	ErrAuth = errors.New("auth: authentication failed")
	// ErrVersion means the peers speak different protocol versions.
	ErrVersion = errors.New("auth: protocol version mismatch")
	// ErrRejected means the server refused the client's Hello (wrong job,
	// world size, duplicate rank, role...).
	ErrRejected = errors.New("auth: peer rejected")
	// ErrProtocol means the peer sent something that is not a valid
	// handshake message.
	ErrProtocol = errors.New("auth: malformed handshake")
	// ErrTLSMismatch means one end uses TLS and the other plain TCP.
	ErrTLSMismatch = errors.New("auth: TLS on one end only")
)

// RequireTLS answers a client that spoke plain TCP to a TLS listener
// with a challenge saying so, so that it reports the mismatch instead of
// a dropped connection.
func RequireTLS(w io.Writer) error {
	return writeMsg(w, encodeChallenge(challenge{version: ProtocolVersion, status: statusTLS}))
}

const (
	nonceSize = 32
	macSize   = sha256.Size
	// maxReason bounds the refusal text sent to a peer.
	maxReason = 512
)

var (
	clientLabel = []byte("gotrain auth client v1")
	serverLabel = []byte("gotrain auth server v1")
)

// Client performs the client side of the handshake on a freshly dialed conn:
// it proves it knows token, sends hello, verifies that the server knows token
// too, and returns the server's Hello. ctx's deadline and cancellation bound
// it; on return conn has no deadline set. On error the caller should close
// conn.
func Client(ctx context.Context, conn net.Conn, token []byte, hello Hello) (Hello, error) {
	hello = fill(hello)
	helloBytes, err := encodeHello(hello)
	if err != nil {
		return Hello{}, err
	}
	stop := bindContext(ctx, conn)
	defer stop()
	peer := conn.RemoteAddr()

	var cn [nonceSize]byte
	rand.Read(cn[:])
	if err := writeMsg(conn, encodeClientHello(clientHello{version: hello.Version, nonce: cn})); err != nil {
		return Hello{}, ioErr(ctx, "send hello to", peer, err)
	}
	buf := make([]byte, MaxMessageSize)
	m, err := readMsg(conn, buf)
	if err != nil {
		return Hello{}, ioErr(ctx, "read challenge from", peer, err)
	}
	ch, err := decodeChallenge(m)
	if err != nil {
		return Hello{}, fmt.Errorf("challenge from %v: %w", peer, err)
	}
	if ch.status == statusTLS {
		return Hello{}, fmt.Errorf("%w: %v uses TLS and this process does not: give every rank the same --tls-ca/--tls-cert/--tls-key (GOTRAIN_TLS_CA, GOTRAIN_TLS_CERT, GOTRAIN_TLS_KEY)", ErrTLSMismatch, peer)
	}
	if ch.status == statusVersion || ch.version != hello.Version {
		return Hello{}, versionErr(peer, ch.version, hello.Version)
	}
	if ch.status != statusOK {
		return Hello{}, fmt.Errorf("%w: challenge from %v has status %d", ErrProtocol, peer, ch.status)
	}

	mac := clientMAC(token, cn[:], ch.nonce[:], helloBytes)
	if err := writeMsg(conn, encodeProof(mac, helloBytes)); err != nil {
		return Hello{}, ioErr(ctx, "send proof to", peer, err)
	}
	m, err = readMsg(conn, buf)
	if err != nil {
		return Hello{}, ioErr(ctx, "read result from", peer, err)
	}
	res, err := decodeResult(m)
	if err != nil {
		return Hello{}, fmt.Errorf("result from %v: %w", peer, err)
	}
	switch res.status {
	case statusOK:
	case statusAuth:
		return Hello{}, fmt.Errorf("%w: %v refused our token (GOTRAIN_TOKEN differs)", ErrAuth, peer)
	case statusRejected:
		return Hello{}, fmt.Errorf("%w: %v refused this peer: %s", ErrRejected, peer, res.reason)
	default:
		return Hello{}, fmt.Errorf("%w: result from %v has status %d", ErrProtocol, peer, res.status)
	}
	want := serverMAC(token, cn[:], ch.nonce[:], helloBytes, res.helloBytes)
	if !hmac.Equal(want, res.mac[:]) {
		return Hello{}, fmt.Errorf("%w: server %v does not know the token (GOTRAIN_TOKEN differs)", ErrAuth, peer)
	}
	if res.hello.Version != hello.Version {
		return Hello{}, versionErr(peer, res.hello.Version, hello.Version)
	}
	return res.hello, nil
}

// Server performs the server side of the handshake on a freshly accepted
// conn. It checks the client's version and token proof, refuses a client
// whose Role differs from hello.Role, then calls accept (if not nil), which
// may refuse the peer's Hello; the refusal's text is also sent to the peer so
// both sides report it. A wrong token is logged with slog, naming the remote
// address. ctx bounds the handshake; on return conn has no deadline set. On
// error the caller should close conn.
func Server(ctx context.Context, conn net.Conn, token []byte, hello Hello, accept func(peer Hello) error) (Hello, error) {
	hello = fill(hello)
	helloBytes, err := encodeHello(hello)
	if err != nil {
		return Hello{}, err
	}
	stop := bindContext(ctx, conn)
	defer stop()
	peer := conn.RemoteAddr()

	buf := make([]byte, MaxMessageSize)
	m, err := readMsg(conn, buf)
	if errors.Is(err, ErrTLSMismatch) {
		// Any plain frame makes the TLS client report a peer without TLS.
		_ = writeMsg(conn, encodeRefusal(statusTLS, ""))
		err = fmt.Errorf("%w: %v uses TLS and this process does not: give every rank the same --tls-ca/--tls-cert/--tls-key (GOTRAIN_TLS_CA, GOTRAIN_TLS_CERT, GOTRAIN_TLS_KEY)", ErrTLSMismatch, peer)
		refusals.Warn("auth: refused connection", "remote", peer, "reason", err)
		return Hello{}, err
	}
	if err != nil {
		return Hello{}, ioErr(ctx, "read hello from", peer, err)
	}
	chello, err := decodeClientHello(m)
	if err != nil {
		refusals.Warn("auth: refused connection", "remote", peer, "reason", err)
		return Hello{}, fmt.Errorf("hello from %v: %w", peer, err)
	}
	var sn [nonceSize]byte
	rand.Read(sn[:])
	if chello.version != hello.Version {
		// Tell the peer our version so it reports the mismatch too.
		_ = writeMsg(conn, encodeChallenge(challenge{version: hello.Version, status: statusVersion, nonce: sn}))
		err := versionErr(peer, chello.version, hello.Version)
		refusals.Warn("auth: refused connection", "remote", peer, "reason", err)
		return Hello{}, err
	}
	if err := writeMsg(conn, encodeChallenge(challenge{version: hello.Version, status: statusOK, nonce: sn})); err != nil {
		return Hello{}, ioErr(ctx, "send challenge to", peer, err)
	}

	m, err = readMsg(conn, buf)
	if err != nil {
		return Hello{}, ioErr(ctx, "read proof from", peer, err)
	}
	pr, err := decodeProof(m)
	if err != nil {
		refusals.Warn("auth: refused connection", "remote", peer, "reason", err)
		return Hello{}, fmt.Errorf("proof from %v: %w", peer, err)
	}
	want := clientMAC(token, chello.nonce[:], sn[:], pr.helloBytes)
	if !hmac.Equal(want, pr.mac[:]) {
		_ = writeMsg(conn, encodeRefusal(statusAuth, ""))
		refusals.Warn("auth: refused connection: wrong or missing token", "remote", peer, "role", hello.Role)
		return Hello{}, fmt.Errorf("%w: %v does not know the token (GOTRAIN_TOKEN differs)", ErrAuth, peer)
	}
	reject := func(err error) (Hello, error) {
		_ = writeMsg(conn, encodeRefusal(statusRejected, err.Error()))
		return Hello{}, fmt.Errorf("%w: %v: %w", ErrRejected, peer, err)
	}
	if pr.hello.Version != hello.Version {
		return reject(versionErr(peer, pr.hello.Version, hello.Version))
	}
	if pr.hello.Role != hello.Role {
		return reject(fmt.Errorf("role %q connected to a %q listener", pr.hello.Role, hello.Role))
	}
	if accept != nil {
		if err := accept(pr.hello); err != nil {
			return reject(err)
		}
	}
	mac := serverMAC(token, chello.nonce[:], sn[:], pr.helloBytes, helloBytes)
	if err := writeMsg(conn, encodeAccept(mac, helloBytes)); err != nil {
		return Hello{}, ioErr(ctx, "send result to", peer, err)
	}
	return pr.hello, nil
}

func fill(h Hello) Hello {
	if h.Version == 0 {
		h.Version = ProtocolVersion
	}
	return h
}

func versionErr(peer net.Addr, peerVersion, ours int) error {
	return fmt.Errorf("%w: peer %v speaks gotrain protocol version %d, this process speaks version %d; run the same gotrain version on every node",
		ErrVersion, peer, peerVersion, ours)
}

// ioErr wraps a read/write failure, naming ctx's error when ctx is why the
// deadline fired.
func ioErr(ctx context.Context, what string, peer net.Addr, err error) error {
	cerr := ctx.Err()
	// The conn's deadline is ctx's, and may fire a moment before ctx's own
	// timer does.
	var ne net.Error
	if d, ok := ctx.Deadline(); cerr == nil && ok && errors.As(err, &ne) && ne.Timeout() && !time.Now().Before(d) {
		cerr = context.DeadlineExceeded
	}
	if cerr != nil {
		return fmt.Errorf("auth: handshake: %s %v: %w (%w)", what, peer, cerr, err)
	}
	return fmt.Errorf("auth: handshake: %s %v: %w", what, peer, err)
}

// bindContext applies ctx's deadline to conn and interrupts blocked I/O when
// ctx is cancelled. The returned function undoes both.
func bindContext(ctx context.Context, conn net.Conn) (stop func()) {
	if d, ok := ctx.Deadline(); ok {
		conn.SetDeadline(d)
	}
	fired := make(chan struct{})
	cancel := context.AfterFunc(ctx, func() {
		conn.SetDeadline(time.Unix(1, 0))
		close(fired)
	})
	return func() {
		if !cancel() {
			<-fired // so its past deadline cannot land after our reset
		}
		conn.SetDeadline(time.Time{})
	}
}

func clientMAC(token, cn, sn, clientHello []byte) []byte {
	h := hmac.New(sha256.New, token)
	h.Write(clientLabel)
	h.Write(cn)
	h.Write(sn)
	h.Write(clientHello)
	return h.Sum(nil)
}

// serverMAC covers both Hellos. The client Hello's encoding is
// self-delimiting, so the concatenation is unambiguous.
func serverMAC(token, cn, sn, clientHello, serverHello []byte) []byte {
	h := hmac.New(sha256.New, token)
	h.Write(serverLabel)
	h.Write(cn)
	h.Write(sn)
	h.Write(clientHello)
	h.Write(serverHello)
	return h.Sum(nil)
}
