package supervisor

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/proto"
)

// keyring is the certificates and private keys of the TLS listeners, read
// at start and again on every reload. Immutable once built: the signing
// goroutines read it, and each worker signs with the keyring it was started
// with (docs/DESIGN.md §9).
type keyring struct {
	certs []*proto.TLSCertificate // for Hello
	keys  []crypto.Signer         // by key id
	info  []CertificateInfo       // for Snapshot
	// failed are the certificates the last reload could not load.
	failed []CertificateError
}

// CertificateInfo is one loaded TLS certificate, for metrics and
// gatehousectl: its listener, its block's name, the names it covers, when
// it expires and when it was loaded.
type CertificateInfo struct {
	Listener string
	Name     string
	DNSNames []string
	NotAfter time.Time
	Loaded   time.Time
}

// CertificateError is a certificate a reload could not load: the previous
// one is still served when there was one (Kept), until a later reload
// loads it.
type CertificateError struct {
	Listener string
	Name     string
	// Error names the configuration block's file:line and, for a file
	// that does not parse, the file and line of the faulty PEM block.
	Error string
	Kept  bool
	// Since is when the reloads began failing for it.
	Since time.Time
}

// loadKeyring reads the certificate chains and keys of cfg's TLS listeners
// at start, where every one must load. An error names the certificate
// block's file:line.
func loadKeyring(cfg *config.Config) (*keyring, error) {
	k, err := buildKeyring(cfg, nil, time.Now())
	if err == nil && len(k.failed) > 0 {
		err = errors.New(k.failed[0].Error)
	}
	return k, err
}

// buildKeyring reads the certificates and keys of cfg's TLS listeners. One
// that fails to load keeps old's for the same listener and name, if any,
// and is listed in failed; a listener left with no certificate at all is an
// error.
func buildKeyring(cfg *config.Config, old *keyring, now time.Time) (*keyring, error) {
	k := &keyring{}
	for _, l := range cfg.Listeners {
		if l.TLS == nil {
			continue
		}
		n := 0
		for _, c := range l.TLS.Certificates {
			chain, key, info, err := loadPair(c)
			info.Listener, info.Name, info.Loaded = l.Name, c.Name, now
			if err != nil {
				e := CertificateError{Listener: l.Name, Name: c.Name, Since: now,
					Error: fmt.Sprintf("%s: listener %q: certificate %q: %v", c.Where, l.Name, c.Name, err)}
				if prev := old.failure(l.Name, c.Name); prev != nil {
					e.Since = prev.Since
				}
				i := old.find(l.Name, c.Name)
				e.Kept = i >= 0
				k.failed = append(k.failed, e)
				if i < 0 {
					continue
				}
				chain, key, info = old.certs[i].GetChain(), old.keys[old.certs[i].GetKeyId()], old.info[i]
			}
			k.certs = append(k.certs, &proto.TLSCertificate{Listener: l.Name, Name: c.Name, Chain: chain, KeyId: uint32(len(k.keys))})
			k.keys = append(k.keys, key)
			k.info = append(k.info, info)
			n++
		}
		if n == 0 && old != nil {
			return nil, fmt.Errorf("listener %q: no certificate could be loaded: %s", l.Name, k.failed[len(k.failed)-1].Error)
		}
	}
	return k, nil
}

// find returns the index of the certificate of listener named name, or -1.
func (k *keyring) find(listener, name string) int {
	if k == nil {
		return -1
	}
	return slices.IndexFunc(k.info, func(i CertificateInfo) bool { return i.Listener == listener && i.Name == name })
}

// failure returns the failure recorded for a certificate, or nil.
func (k *keyring) failure(listener, name string) *CertificateError {
	if k == nil {
		return nil
	}
	for i := range k.failed {
		if k.failed[i].Listener == listener && k.failed[i].Name == name {
			return &k.failed[i]
		}
	}
	return nil
}

// sameCertificates reports whether workers started with a and with b serve
// the same certificates with the same keys, so that a reload need not
// replace them.
func sameCertificates(a, b *keyring) bool {
	if len(a.hello()) != len(b.hello()) {
		return false
	}
	for i, c := range a.certs {
		o := b.certs[i]
		if c.GetListener() != o.GetListener() || c.GetName() != o.GetName() || c.GetKeyId() != o.GetKeyId() ||
			!slices.EqualFunc(c.GetChain(), o.GetChain(), bytes.Equal) {
			return false
		}
		if !a.keys[c.GetKeyId()].Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(b.keys[o.GetKeyId()].Public()) {
			return false
		}
	}
	return true
}

// certificates returns what Snapshot reports of the loaded certificates.
func (k *keyring) certificates() []CertificateInfo {
	if k == nil {
		return nil
	}
	return k.info
}

// certificateErrors returns the certificates the last reload could not
// load.
func (s *Supervisor) certificateErrors() []CertificateError {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	return s.keys.failures()
}

// failures returns the certificates the last reload could not load.
func (k *keyring) failures() []CertificateError {
	if k == nil {
		return nil
	}
	return k.failed
}

// hello returns the certificates for a worker's Hello (none without a
// keyring: a test's supervisor).
func (k *keyring) hello() []*proto.TLSCertificate {
	if k == nil {
		return nil
	}
	return k.certs
}

// loadPair reads one PEM chain and its PEM key and checks that they match
// and that the key is RSA (2048 bits or more) or ECDSA. Errors name the
// file, and the line of a PEM block that does not parse.
func loadPair(c config.Certificate) ([][]byte, crypto.Signer, CertificateInfo, error) {
	var info CertificateInfo
	certs, err := readPEM(c.Cert)
	if err != nil {
		return nil, nil, info, err
	}
	var chain [][]byte
	var leaf *x509.Certificate
	for _, b := range certs {
		if b.Type != "CERTIFICATE" {
			continue
		}
		x, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, nil, info, fmt.Errorf("%s:%d: a CERTIFICATE block that does not parse: %w", c.Cert, b.line, err)
		}
		if leaf == nil {
			leaf = x
		}
		chain = append(chain, b.Bytes)
	}
	if leaf == nil {
		return nil, nil, info, fmt.Errorf("%s: no CERTIFICATE block", c.Cert)
	}
	keys, err := readPEM(c.Key)
	if err != nil {
		return nil, nil, info, err
	}
	i := slices.IndexFunc(keys, func(b pemBlock) bool { return strings.HasSuffix(b.Type, "PRIVATE KEY") })
	if i < 0 {
		return nil, nil, info, fmt.Errorf("%s: no PRIVATE KEY block", c.Key)
	}
	key, err := parseKey(keys[i].Bytes)
	if err != nil {
		return nil, nil, info, fmt.Errorf("%s:%d: %w", c.Key, keys[i].line, err)
	}
	if rk, ok := key.(*rsa.PrivateKey); ok && rk.N.BitLen() < 2048 {
		return nil, nil, info, fmt.Errorf("%s: an RSA key of %d bits (2048 or more are accepted)", c.Key, rk.N.BitLen())
	}
	if pub, ok := leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(key.Public()) {
		return nil, nil, info, fmt.Errorf("the key in %s does not match the certificate in %s", c.Key, c.Cert)
	}
	info.DNSNames, info.NotAfter = leaf.DNSNames, leaf.NotAfter
	return chain, key, info, nil
}

// parseKey decodes a PKCS #8, PKCS #1 or SEC 1 private key, RSA or ECDSA.
func parseKey(der []byte) (crypto.Signer, error) {
	if k, err := x509.ParsePKCS8PrivateKey(der); err == nil {
		switch k := k.(type) {
		case *rsa.PrivateKey:
			return k, nil
		case *ecdsa.PrivateKey:
			return k, nil
		}
		return nil, fmt.Errorf("a %T key (RSA or ECDSA are accepted)", k)
	}
	if k, err := x509.ParsePKCS1PrivateKey(der); err == nil {
		return k, nil
	}
	if k, err := x509.ParseECPrivateKey(der); err == nil {
		return k, nil
	}
	return nil, errors.New("a PRIVATE KEY block that does not parse as PKCS #8, PKCS #1 or SEC 1")
}

// pemBlock is a PEM block and the line its BEGIN is on.
type pemBlock struct {
	*pem.Block
	line int
}

// readPEM reads every PEM block of a file. A block that does not decode
// (a damaged base64 body, a missing END line) is an error naming its line.
func readPEM(path string) ([]pemBlock, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parsePEM(path, data)
}

// parsePEM is readPEM of data read from path.
func parsePEM(path string, data []byte) ([]pemBlock, error) {
	var blocks []pemBlock
	begin := []byte("-----BEGIN ")
	for rest := data; ; {
		i := bytes.Index(rest, begin)
		if i < 0 {
			break
		}
		line := 1 + bytes.Count(data[:len(data)-len(rest)+i], []byte("\n"))
		// Up to the next BEGIN only: pem.Decode would skip a damaged
		// block and return the next one.
		seg := rest[i:]
		if j := bytes.Index(seg[len(begin):], begin); j >= 0 {
			seg = seg[:len(begin)+j]
		}
		b, _ := pem.Decode(seg)
		if b == nil {
			return nil, fmt.Errorf("%s:%d: a PEM block that does not decode", path, line)
		}
		blocks = append(blocks, pemBlock{Block: b, line: line})
		rest = rest[i+len(seg):]
	}
	if len(blocks) == 0 {
		return nil, fmt.Errorf("%s: no PEM block", path)
	}
	return blocks, nil
}
