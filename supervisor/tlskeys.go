package supervisor

import (
	"bytes"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/internal/clienthello"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/sandbox"
)

// keyring is the certificates and private keys of the TLS listeners, read
// at start and again on every reload. Immutable once built: the signing
// goroutines read it, and each worker signs with the keyring it was started
// with (docs/DESIGN.md §9).
type keyring struct {
	certs []*proto.TLSCertificate // for Hello, by key id
	keys  []crypto.Signer         // by key id
	info  []CertificateInfo       // for Snapshot
	picks []*tls.Certificate      // by key id, for clienthello.Pick
	// listeners are each TLS listener's certificates, in Hello's order, as
	// the choice of a handshake's certificate takes them.
	listeners map[string]*listenerCerts
	// failed are the certificates the last reload could not load.
	failed []CertificateError
}

// listenerCerts are one listener's certificates, its default first: their
// key ids and their chains for clienthello.Pick.
type listenerCerts struct {
	ids   []uint16
	picks []*tls.Certificate
}

// maxCertificates bounds the certificates of a configuration, so that a
// connection records the key its handshake may sign with in 16 bits.
const maxCertificates = 1 << 16

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

// ErrCertificates is returned by New when a TLS certificate or key does
// not load. config.Load with its host checks reports the same problems
// first, so it happens only when a file changed in between; like them, it
// is a configuration error.
var ErrCertificates = errors.New("supervisor: loading TLS certificates")

// loadKeyring reads the certificate chains and keys of cfg's TLS listeners
// at start, where every one must load. The error lists every failure, each
// naming its certificate block's file:line.
func loadKeyring(cfg *config.Config) (*keyring, error) {
	k, err := buildKeyring(cfg, nil, nil, time.Now())
	if err == nil && len(k.failed) > 0 {
		msgs := make([]string, len(k.failed))
		for i, f := range k.failed {
			msgs[i] = f.Error
		}
		err = fmt.Errorf("%w:\n%s", ErrCertificates, strings.Join(msgs, "\n"))
	}
	return k, err
}

// buildKeyring reads the certificates and keys of cfg's TLS listeners as
// the account as (nil: the calling process), with config.LoadKeyPair, the
// code `gatehouse -check` runs. One that fails to load keeps old's for the
// same listener and name, if any, and is listed in failed; a listener left
// with no certificate at all is an error.
func buildKeyring(cfg *config.Config, old *keyring, as *sandbox.Account, now time.Time) (*keyring, error) {
	k := &keyring{listeners: map[string]*listenerCerts{}}
	for _, l := range cfg.Listeners {
		if l.TLS == nil {
			continue
		}
		n := 0
		lc := &listenerCerts{}
		k.listeners[l.Name] = lc
		for _, c := range l.TLS.Certificates {
			var chain [][]byte
			var leaf *x509.Certificate
			var key crypto.Signer
			info := CertificateInfo{Listener: l.Name, Name: c.Name, Loaded: now}
			pair, err := config.LoadKeyPair(c, as)
			if err == nil {
				chain, leaf, key, info.DNSNames, info.NotAfter = pair.Chain, pair.Leaf, pair.Key, pair.Leaf.DNSNames, pair.Leaf.NotAfter
			} else {
				e := CertificateError{Listener: l.Name, Name: c.Name, Since: now,
					Error: fmt.Sprintf("%s: listener %q: certificate %q: %s", c.Where, l.Name, c.Name, strings.ReplaceAll(err.Error(), "\n", "; "))}
				if prev := old.failure(l.Name, c.Name); prev != nil {
					e.Since = prev.Since
				}
				i := old.find(l.Name, c.Name)
				e.Kept = i >= 0
				k.failed = append(k.failed, e)
				if i < 0 {
					continue
				}
				chain, leaf, key, info = old.certs[i].GetChain(), old.picks[i].Leaf, old.keys[old.certs[i].GetKeyId()], old.info[i]
			}
			if len(k.keys) == maxCertificates {
				return nil, fmt.Errorf("%s: listener %q: more than %d TLS certificates", c.Where, l.Name, maxCertificates)
			}
			pick := clienthello.Certificate(chain, leaf)
			lc.ids = append(lc.ids, uint16(len(k.keys)))
			lc.picks = append(lc.picks, pick)
			k.picks = append(k.picks, pick)
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

// listener returns the certificates of the listener named name, or nil.
func (k *keyring) listener(name string) *listenerCerts {
	if k == nil {
		return nil
	}
	return k.listeners[name]
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
