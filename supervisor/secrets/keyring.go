// Package secrets holds what the supervisor reads as its own account for
// workers that may not read it (docs/DESIGN.md §9): the TLS listeners'
// certificates and private keys, and the signatures made with them for a
// worker's handshake; and the htpasswd entries of basic auth. It never
// imports the loop: the loop keeps each connection's Grant and asks.
package secrets

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

// Ring is the certificates and private keys of the TLS listeners, read at
// start and again on every reload. Immutable once built: the signing
// goroutines read it, and each worker signs with the ring it was started
// with (docs/DESIGN.md §9). A nil Ring has no certificate.
type Ring struct {
	certs []*proto.TLSCertificate // for Hello, by key id
	keys  []crypto.Signer         // by key id
	info  []CertificateInfo       // for Snapshot
	picks []*tls.Certificate      // by key id, for clienthello.Pick
	// listeners are each TLS listener's certificates, in Hello's order, as
	// the choice of a handshake's certificate takes them.
	listeners map[string]*Listener
	// failed are the certificates the last reload could not load.
	failed []CertificateError
}

// Listener is one TLS listener's certificates, its default first: their
// key ids, their chains for clienthello.Pick and their public keys.
type Listener struct {
	ids   []uint16
	picks []*tls.Certificate
	pubs  []crypto.PublicKey
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

// ErrCertificates is returned by Load, and so by supervisor.New, when a TLS certificate or key does
// not load. config.Load with its host checks reports the same problems
// first, so it happens only when a file changed in between; like them, it
// is a configuration error.
var ErrCertificates = errors.New("supervisor: loading TLS certificates")

// Load reads the certificate chains and keys of cfg's TLS listeners at
// start, where every one must load. The error lists every failure, each
// naming its certificate block's file:line.
func Load(cfg *config.Config) (*Ring, error) {
	k, err := Reload(cfg, nil, nil, time.Now())
	if err == nil && len(k.failed) > 0 {
		msgs := make([]string, len(k.failed))
		for i, f := range k.failed {
			msgs[i] = f.Error
		}
		err = fmt.Errorf("%w:\n%s", ErrCertificates, strings.Join(msgs, "\n"))
	}
	return k, err
}

// Reload reads the certificates and keys of cfg's TLS listeners as the
// account as (nil: the calling process), with config.LoadKeyPair, the code
// `gatehouse -check` runs. One that fails to load keeps old's for the same
// listener and name, if any, and is listed in Failures; a listener left
// with no certificate at all is an error.
func Reload(cfg *config.Config, old *Ring, as *sandbox.Account, now time.Time) (*Ring, error) {
	k := &Ring{listeners: map[string]*Listener{}}
	for _, l := range cfg.Listeners {
		if l.TLS == nil {
			continue
		}
		n := 0
		lc := &Listener{}
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
			lc.pubs = append(lc.pubs, key.Public())
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

// Listener returns the certificates of the TLS listener named name, or nil.
func (k *Ring) Listener(name string) *Listener {
	if k == nil {
		return nil
	}
	return k.listeners[name]
}

// find returns the index of the certificate of listener named name, or -1.
func (k *Ring) find(listener, name string) int {
	if k == nil {
		return -1
	}
	return slices.IndexFunc(k.info, func(i CertificateInfo) bool { return i.Listener == listener && i.Name == name })
}

// failure returns the failure recorded for a certificate, or nil.
func (k *Ring) failure(listener, name string) *CertificateError {
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

// Same reports whether workers started with a and with b serve the same
// certificates with the same keys, so that a reload need not replace them.
func Same(a, b *Ring) bool {
	if len(a.Hello()) != len(b.Hello()) {
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

// Certificates returns what a snapshot reports of the loaded certificates.
func (k *Ring) Certificates() []CertificateInfo {
	if k == nil {
		return nil
	}
	return k.info
}

// Failures returns the certificates the last reload could not load.
func (k *Ring) Failures() []CertificateError {
	if k == nil {
		return nil
	}
	return k.failed
}

// Hello returns the certificates for a worker's Hello (none without a
// ring: a test's supervisor).
func (k *Ring) Hello() []*proto.TLSCertificate {
	if k == nil {
		return nil
	}
	return k.certs
}
