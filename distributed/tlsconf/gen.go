package tlsconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// DefaultValidity is how long the certificates Generate makes are valid.
const DefaultValidity = 365 * 24 * time.Hour

// File names Generate writes in its directory; each host gets HOST.pem
// and HOST-key.pem.
const (
	CAFile    = "ca.pem"
	CAKeyFile = "ca-key.pem"
)

// CertFile and KeyFile name host's certificate and key in a directory
// Generate wrote.
func CertFile(host string) string { return host + ".pem" }

// KeyFile names host's key (see CertFile).
func KeyFile(host string) string { return host + "-key.pem" }

// ParseHosts splits a comma-separated host list into host names or IP
// addresses, dropping a slot count (node0:2, as `gotrain run --hosts`
// takes) and a user (user@node0). It refuses an empty, duplicate or
// unusable name with one line naming it.
func ParseHosts(list string) ([]string, error) {
	var hosts []string
	seen := map[string]bool{}
	for _, h := range strings.Split(list, ",") {
		h = strings.TrimSpace(h)
		if _, after, ok := strings.Cut(h, "@"); ok {
			h = after
		}
		if i := strings.LastIndexByte(h, ':'); i > 0 && strings.Count(h, ":") == 1 {
			if _, err := strconv.Atoi(h[i+1:]); err == nil {
				h = h[:i]
			}
		}
		h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
		switch {
		case h == "":
			return nil, fmt.Errorf("%w: empty host name in %q", ErrConfig, list)
		case net.ParseIP(h) == nil && !validName(h):
			return nil, fmt.Errorf("%w: host %q is neither a host name nor an IP address", ErrConfig, h)
		case seen[h]:
			return nil, fmt.Errorf("%w: host %q is listed twice", ErrConfig, h)
		}
		seen[h] = true
		hosts = append(hosts, h)
	}
	return hosts, nil
}

// validName reports whether h is a DNS name (letters, digits, '-', '.'
// and '_'), which is also a safe file name.
func validName(h string) bool {
	if len(h) > 253 || strings.HasPrefix(h, ".") || strings.HasPrefix(h, "-") || strings.Contains(h, "..") {
		return false
	}
	for _, r := range h {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_') {
			return false
		}
	}
	return true
}

// Generate makes a CA and, for each host, a certificate it signed, in
// dir (made if missing, mode 0700): CAFile, CAKeyFile and each host's
// CertFile and KeyFile. Keys are ECDSA P-256, written mode 0600; each
// host's certificate names the host (as an IP address SAN if it is one,
// else a DNS SAN) and is good for TLS servers and clients, from now
// until validity has passed. It refuses to overwrite any file, before
// writing one.
func Generate(dir string, hosts []string, validity time.Duration) error {
	if len(hosts) == 0 {
		return fmt.Errorf("%w: no hosts", ErrConfig)
	}
	if validity <= 0 {
		return fmt.Errorf("%w: validity %v is not positive", ErrConfig, validity)
	}
	files := []string{CAFile, CAKeyFile}
	for _, h := range hosts {
		files = append(files, CertFile(h), KeyFile(h))
	}
	for _, f := range files {
		p := filepath.Join(dir, f)
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("%w: %s exists: not overwriting it (remove it, or pick another directory)", ErrConfig, p)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "gotrain cluster CA", Organization: []string{"gotrain"}},
		NotBefore:             now.Add(-time.Hour), // clocks of the nodes differ a little
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	if err := writeKey(filepath.Join(dir, CAKeyFile), caKey); err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, CAFile), "CERTIFICATE", caDER, 0o644); err != nil {
		return err
	}
	for _, h := range hosts {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial(),
			Subject:      pkix.Name{CommonName: h, Organization: []string{"gotrain"}},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(validity),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		}
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = []net.IP{ip}
		} else {
			tmpl.DNSNames = []string{h}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		if err := writeKey(filepath.Join(dir, KeyFile(h)), key); err != nil {
			return err
		}
		if err := writePEM(filepath.Join(dir, CertFile(h)), "CERTIFICATE", der, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

func writeKey(path string, k *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return err
	}
	return writePEM(path, "PRIVATE KEY", der, 0o600)
}

// writePEM writes one PEM block to a new file (O_EXCL: never over one
// that appeared meanwhile) with mode perm.
func writePEM(path, typ string, der []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if err := pem.Encode(f, &pem.Block{Type: typ, Bytes: der}); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
