// Package tlsconf is gotrain's mutual TLS: the store, the data plane and
// the launcher's stores run inside TLS 1.3 when a job names a CA, a
// certificate and its key (--tls-ca, --tls-cert, --tls-key, or
// GOTRAIN_TLS_CA, GOTRAIN_TLS_CERT, GOTRAIN_TLS_KEY). The token handshake
// of the connection still runs, inside the TLS stream.
//
// Both ends present a certificate and verify the other's against the
// job's CA only (not the system's roots). Host names are not checked: a
// certificate the job's CA signed makes its holder a member of the
// cluster. Ranks reach each other at addresses chosen at run time (the
// interface SocketIfname selects, the route to the master), which a
// certificate made beforehand may not name, and a rank's identity is
// proved again by the token handshake inside TLS. A CA per job or per
// cluster (see `gotrain tls init`) is the trust boundary.
//
// A peer that is refused, on either end, gets one line naming it and
// why: no certificate, a certificate from another CA, or plain TCP
// against TLS (see Explain).
package tlsconf

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// Environment variables of the TLS settings; `gotrain run` sets them for
// its workers from its flags, and under Slurm, MPI or Kubernetes they are
// the interface.
const (
	EnvCA   = "GOTRAIN_TLS_CA"
	EnvCert = "GOTRAIN_TLS_CERT"
	EnvKey  = "GOTRAIN_TLS_KEY"
	// EnvHost is the host name HostPattern expands to; unset means
	// os.Hostname(). An agent of `gotrain run --hosts` sets it to the
	// host's name in the host list.
	EnvHost = "GOTRAIN_TLS_HOST"
)

// HostPattern in a certificate or key path stands for the host's name
// (EnvHost, else the system's host name), so one setting names a per-host
// file on every host: --tls-cert /etc/gotrain/{host}.pem.
const HostPattern = "{host}"

// ErrConfig is wrapped by the errors of settings that cannot work.
var ErrConfig = errors.New("tls: bad settings")

// Files names the PEM files of a TLS set-up. The zero value means no
// TLS.
type Files struct {
	// CA holds the certificates of the job's CA: peers' certificates must
	// chain to one of them.
	CA string
	// Cert is this process's certificate chain, Key its private key.
	Cert, Key string
}

// Enabled reports whether any file is named.
func (f Files) Enabled() bool { return f.CA != "" || f.Cert != "" || f.Key != "" }

// FromEnv reads Files from the environment through lookup (os.LookupEnv
// when nil).
func FromEnv(lookup func(string) (string, bool)) Files {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	get := func(k string) string { v, _ := lookup(k); return strings.TrimSpace(v) }
	return Files{CA: get(EnvCA), Cert: get(EnvCert), Key: get(EnvKey)}
}

// Expand replaces HostPattern in Cert and Key by host.
func (f Files) Expand(host string) Files {
	f.Cert = strings.ReplaceAll(f.Cert, HostPattern, host)
	f.Key = strings.ReplaceAll(f.Key, HostPattern, host)
	return f
}

// HostName is the name HostPattern stands for: EnvHost through lookup
// (os.LookupEnv when nil), else os.Hostname().
func HostName(lookup func(string) (string, bool)) string {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	if h, ok := lookup(EnvHost); ok && h != "" {
		return h
	}
	h, _ := os.Hostname()
	return h
}

// Config is a loaded TLS set-up: the CA pool and this process's
// certificate. It is safe for concurrent use.
type Config struct {
	files   Files
	roots   *x509.CertPool
	cert    tls.Certificate
	subject string // this process's certificate, for messages
}

// LoadEnv loads the Files named in the environment (see FromEnv), with
// HostPattern expanded (see HostName); it returns nil and no error when
// none is named.
func LoadEnv(lookup func(string) (string, bool)) (*Config, error) {
	f := FromEnv(lookup)
	if !f.Enabled() {
		return nil, nil
	}
	return Load(f.Expand(HostName(lookup)))
}

// Load reads and checks f: all three files named and readable, the CA
// file holding certificates, the key matching the certificate, and the
// certificate signed by the CA and valid now (so that a mistake is found
// here, not as a refused peer).
func Load(f Files) (*Config, error) {
	var missing []string
	for _, x := range []struct{ name, v string }{{"--tls-ca (" + EnvCA + ")", f.CA}, {"--tls-cert (" + EnvCert + ")", f.Cert}, {"--tls-key (" + EnvKey + ")", f.Key}} {
		if x.v == "" {
			missing = append(missing, x.name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: TLS needs a CA, a certificate and a key; %s not set", ErrConfig, strings.Join(missing, " and "))
	}
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, fmt.Errorf("%w: the CA file: %w", ErrConfig, err)
	}
	roots := x509.NewCertPool()
	if n := addPEM(roots, caPEM); n == 0 {
		return nil, fmt.Errorf("%w: the CA file %s holds no PEM certificate", ErrConfig, f.CA)
	}
	certPEM, err := os.ReadFile(f.Cert)
	if err != nil {
		return nil, fmt.Errorf("%w: the certificate file: %w", ErrConfig, err)
	}
	keyPEM, err := os.ReadFile(f.Key)
	if err != nil {
		return nil, fmt.Errorf("%w: the key file: %w", ErrConfig, err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%w: certificate %s with key %s: %w", ErrConfig, f.Cert, f.Key, err)
	}
	leaf := cert.Leaf
	c := &Config{files: f, roots: roots, cert: cert, subject: describe(leaf)}
	if _, err := c.verify([][]byte(cert.Certificate), x509.ExtKeyUsageAny); err != nil {
		return nil, fmt.Errorf("%w: this process's certificate %s (%s) does not verify against the CA %s: %w", ErrConfig, f.Cert, c.subject, f.CA, err)
	}
	return c, nil
}

// addPEM adds every certificate in b to pool and returns how many.
func addPEM(pool *x509.CertPool, b []byte) int {
	n := 0
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return n
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		if c, err := x509.ParseCertificate(blk.Bytes); err == nil {
			pool.AddCert(c)
			n++
		}
	}
}

// Files returns the files c was loaded from.
func (c *Config) Files() Files { return c.files }

// verify checks a peer's certificate chain (leaf first) against the CA,
// for usage.
func (c *Config) verify(raw [][]byte, usage x509.ExtKeyUsage) (*x509.Certificate, error) {
	if len(raw) == 0 {
		return nil, errNoCert
	}
	certs := make([]*x509.Certificate, len(raw))
	for i, b := range raw {
		x, err := x509.ParseCertificate(b)
		if err != nil {
			return nil, fmt.Errorf("unparsable certificate: %w", err)
		}
		certs[i] = x
	}
	inter := x509.NewCertPool()
	for _, x := range certs[1:] {
		inter.AddCert(x)
	}
	_, err := certs[0].Verify(x509.VerifyOptions{Roots: c.roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}})
	return certs[0], err
}

var errNoCert = errors.New("no certificate")

// CertError is a peer certificate this process refused.
type CertError struct {
	// Subject describes the certificate ("" if there was none).
	Subject string
	// CA is the CA file it was checked against.
	CA  string
	Err error
}

func (e *CertError) Error() string {
	if e.Subject == "" {
		return "presented no certificate"
	}
	var ua x509.UnknownAuthorityError
	if errors.As(e.Err, &ua) {
		return fmt.Sprintf("presented a certificate (%s) not signed by the job's CA (%s)", e.Subject, e.CA)
	}
	var inv x509.CertificateInvalidError
	if errors.As(e.Err, &inv) && inv.Reason == x509.Expired {
		return fmt.Sprintf("presented a certificate (%s) that is expired or not yet valid: %v", e.Subject, e.Err)
	}
	return fmt.Sprintf("presented a certificate (%s) that does not verify against the job's CA (%s): %v", e.Subject, e.CA, e.Err)
}

func (e *CertError) Unwrap() error { return e.Err }

// describe names a certificate for messages: its subject and issuer.
func describe(x *x509.Certificate) string {
	if x == nil {
		return "unparsable"
	}
	s := "CN=" + x.Subject.CommonName
	if x.Subject.CommonName == "" {
		s = x.Subject.String()
	}
	return s + ", issued by CN=" + x.Issuer.CommonName
}

func (c *Config) verifyPeer(usage x509.ExtKeyUsage) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		raw := make([][]byte, len(cs.PeerCertificates))
		for i, x := range cs.PeerCertificates {
			raw[i] = x.Raw
		}
		leaf, err := c.verify(raw, usage)
		if err != nil {
			sub := ""
			if leaf != nil || len(raw) > 0 {
				sub = describe(leaf)
			}
			return &CertError{Subject: sub, CA: c.files.CA, Err: err}
		}
		return nil
	}
}

// Server returns the tls.Config of a listener: TLS 1.3, a client
// certificate required and verified against the CA.
func (c *Config) Server() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{c.cert},
		// Verified by verifyPeer against the CA alone, with our messages.
		ClientAuth:       tls.RequireAnyClientCert,
		VerifyConnection: c.verifyPeer(x509.ExtKeyUsageClientAuth),
		// A frame is written in large pieces: full records from the start.
		DynamicRecordSizingDisabled: true,
	}
}

// Client returns the tls.Config of a dialer: TLS 1.3, this process's
// certificate, the server's verified against the CA without a host name
// (see the package doc).
func (c *Config) Client() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{c.cert},
		// The chain is verified by verifyPeer against the CA alone; the
		// host name is not checked (see the package doc).
		InsecureSkipVerify:          true,
		VerifyConnection:            c.verifyPeer(x509.ExtKeyUsageServerAuth),
		DynamicRecordSizingDisabled: true,
	}
}

// ServerConn runs the server side of the TLS handshake on an accepted
// conn within ctx, and returns the TLS connection or an error naming
// peer (see Explain). A client that spoke plain TCP is told so in the
// token handshake's terms (auth.RequireTLS via answerPlain) before conn
// is closed. On error the caller closes conn.
func (c *Config) ServerConn(ctx context.Context, conn net.Conn, peer string, answerPlain func(net.Conn) error) (*tls.Conn, error) {
	tc := tls.Server(conn, c.Server())
	err := tc.HandshakeContext(ctx)
	if err == nil {
		negotiated.Store(ConnectionInfo(tc.ConnectionState()))
		return tc, nil
	}
	var rh tls.RecordHeaderError
	if errors.As(err, &rh) && rh.Conn != nil && answerPlain != nil {
		rh.Conn.SetWriteDeadline(time.Now().Add(time.Second))
		answerPlain(rh.Conn)
	}
	return nil, Explain(err, peer)
}

// ClientConn runs the client side of the TLS handshake on a dialed conn
// within ctx and returns the TLS connection or an error naming peer.
// With TLS 1.3 a server that refuses this process's certificate says so
// only at the first read: run Explain on the errors of the first
// exchange too. On error the caller closes conn.
func (c *Config) ClientConn(ctx context.Context, conn net.Conn, peer string) (*tls.Conn, error) {
	tc := tls.Client(conn, c.Client())
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, Explain(err, peer)
	}
	negotiated.Store(ConnectionInfo(tc.ConnectionState()))
	return tc, nil
}

// ErrRefused is wrapped by the errors Explain makes: a TLS peer or this
// process refused the other, which no retry mends.
var ErrRefused = errors.New("tls: refused")

// Explain turns an error of a TLS handshake with peer (or of the first
// exchange after it) into one line that names peer and says what is
// wrong, wrapping ErrRefused; other errors come back as they are.
func Explain(err error, peer string) error {
	if err == nil {
		return nil
	}
	var ce *CertError
	var rh tls.RecordHeaderError
	var op *net.OpError
	switch {
	case errors.As(err, &ce):
		return fmt.Errorf("%w: peer %s %v", ErrRefused, peer, ce)
	case errors.As(err, &rh):
		return fmt.Errorf("%w: peer %s speaks plain TCP while this process uses TLS: give every rank the same --tls-ca/--tls-cert/--tls-key (%s, %s, %s)", ErrRefused, peer, EnvCA, EnvCert, EnvKey)
	case strings.Contains(err.Error(), "tls: client didn't provide a certificate"):
		return fmt.Errorf("%w: peer %s presented no certificate", ErrRefused, peer)
	case errors.As(err, &op) && op.Op == "remote error":
		switch msg := op.Err.Error(); {
		case strings.Contains(msg, "bad certificate"), strings.Contains(msg, "unknown certificate authority"),
			strings.Contains(msg, "certificate required"), strings.Contains(msg, "certificate expired"):
			return fmt.Errorf("%w: peer %s refused this process's certificate (%s): it does not verify against the peer's CA", ErrRefused, peer, msg)
		default:
			return fmt.Errorf("%w: peer %s ended the TLS handshake: %s", ErrRefused, peer, msg)
		}
	}
	return err
}

// negotiated is what the process's last TLS handshake agreed on.
var negotiated atomic.Value // string

// Negotiated returns the TLS version and cipher suite the process's last
// completed handshake agreed on (see ConnectionInfo), "" before any.
func Negotiated() string {
	s, _ := negotiated.Load().(string)
	return s
}

// ConnectionInfo describes an established connection's TLS: version and
// cipher suite ("TLS 1.3 TLS_AES_128_GCM_SHA256").
func ConnectionInfo(cs tls.ConnectionState) string {
	return tls.VersionName(cs.Version) + " " + tls.CipherSuiteName(cs.CipherSuite)
}
