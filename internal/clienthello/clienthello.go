// Package clienthello reads what the supervisor needs of the ClientHello it
// peeks from a new TLS connection before dispatching it: enough to choose
// the certificate the handshake presents, as crypto/tls on the worker would
// choose it, and the signature schemes the client offers, which bound the
// signatures the supervisor makes for that handshake (issue 27: a worker
// is an adversary).
//
// Parse is exactly as strict as crypto/tls on the fields it reads
// (TestParseMatchesCryptoTLS, FuzzParse): where crypto/tls accepts a
// ClientHello, Parse reads the same values or none at all. It ignores the
// other extensions, which crypto/tls may refuse: a handshake it refuses
// asks for no signature.
package clienthello

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"io"
	"slices"
)

// CipherSuites are the TLS 1.2 suites the workers offer: ECDHE with AEAD
// only. TLS 1.3 suites are all AEAD and not configurable. Pick considers
// them when it mirrors crypto/tls's choice of a certificate.
var CipherSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// Hello is what Parse reads of a ClientHello. The slices are the caller's
// to keep.
type Hello struct {
	Version          uint16 // legacy_version
	CipherSuites     []uint16
	ServerName       string
	SupportedCurves  []tls.CurveID
	SupportedPoints  []uint8
	SignatureSchemes []tls.SignatureScheme
	// SupportedVersions is the supported_versions extension's list, nil
	// without one.
	SupportedVersions []uint16
}

// Extension types read (RFC 6066, 8422, 8446).
const (
	extServerName          = 0
	extSupportedCurves     = 10
	extSupportedPoints     = 11
	extSignatureAlgorithms = 13
	extSupportedVersions   = 43
)

// reader reads big-endian fields off a byte string; a short read leaves it
// failed (ok false) and returns zeros.
type reader struct {
	b  []byte
	ok bool
}

func (r *reader) bytes(n int) []byte {
	if !r.ok || n > len(r.b) {
		r.ok = false
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u8() int {
	b := r.bytes(1)
	if b == nil {
		return 0
	}
	return int(b[0])
}

func (r *reader) u16() int {
	b := r.bytes(2)
	if b == nil {
		return 0
	}
	return int(binary.BigEndian.Uint16(b))
}

// vec8 and vec16 read a vector with a one- or two-byte length prefix.
func (r *reader) vec8() reader  { return r.vec(r.u8()) }
func (r *reader) vec16() reader { return r.vec(r.u16()) }

func (r *reader) vec(n int) reader {
	b := r.bytes(n)
	return reader{b: b, ok: r.ok}
}

// u16s reads the rest of r as a list of 16-bit values; an odd length fails.
func (r *reader) u16s() []uint16 {
	if len(r.b)%2 != 0 {
		r.ok = false
		return nil
	}
	out := make([]uint16, 0, len(r.b)/2)
	for len(r.b) > 0 {
		out = append(out, uint16(r.u16()))
	}
	return out
}

// TLS record and handshake framing.
const (
	recordHeader    = 5
	recordHandshake = 0x16
	typeClientHello = 1
	handshakeHeader = 4
)

// Parse reads the ClientHello at the start of record, a TLS record (its
// header included). It reports false when the record does not hold a
// whole ClientHello as crypto/tls would accept it: not a handshake record,
// a ClientHello continued in a later record, or a field crypto/tls would
// refuse.
func Parse(record []byte) (*Hello, bool) {
	if len(record) < recordHeader || record[0] != recordHandshake {
		return nil, false
	}
	body := record[recordHeader:]
	if n := int(binary.BigEndian.Uint16(record[3:5])); n < len(body) {
		body = body[:n]
	}
	if len(body) < handshakeHeader || body[0] != typeClientHello {
		return nil, false
	}
	n := int(body[1])<<16 | int(body[2])<<8 | int(body[3])
	if handshakeHeader+n > len(body) {
		return nil, false
	}
	r := reader{b: body[handshakeHeader : handshakeHeader+n], ok: true}
	h := &Hello{Version: uint16(r.u16())}
	r.bytes(32) // random
	r.vec8()    // legacy_session_id
	suites := r.vec16()
	h.CipherSuites = suites.u16s()
	r.vec8() // legacy_compression_methods
	if !r.ok || !suites.ok {
		return nil, false
	}
	if len(r.b) == 0 {
		return h, true
	}
	exts := r.vec16()
	if !r.ok || len(r.b) != 0 {
		return nil, false
	}
	var seen [1 << 16 / 64]uint64
	for exts.ok && len(exts.b) > 0 {
		typ := exts.u16()
		data := exts.vec16()
		if !exts.ok {
			return nil, false
		}
		if seen[typ/64]&(1<<(typ%64)) != 0 {
			return nil, false // crypto/tls refuses a repeated extension
		}
		seen[typ/64] |= 1 << (typ % 64)
		if !h.extension(typ, &data) {
			return nil, false
		}
	}
	return h, exts.ok
}

// extension reads one extension of the types Hello holds, as crypto/tls
// does (an empty list, trailing bytes and a server name ending in a dot
// refused), and ignores the others.
func (h *Hello) extension(typ int, data *reader) bool {
	switch typ {
	case extServerName:
		names := data.vec16()
		if !names.ok || len(names.b) == 0 {
			return false
		}
		for len(names.b) > 0 {
			kind := names.u8()
			name := names.vec16()
			if !names.ok || len(name.b) == 0 {
				return false
			}
			if kind != 0 {
				continue
			}
			if h.ServerName != "" {
				return false // two host names
			}
			h.ServerName = string(name.b)
			if name.b[len(name.b)-1] == '.' {
				return false
			}
		}
	case extSupportedCurves:
		list := data.vec16()
		ids := list.u16s()
		if !list.ok || len(ids) == 0 {
			return false
		}
		h.SupportedCurves = make([]tls.CurveID, len(ids))
		for i, id := range ids {
			h.SupportedCurves[i] = tls.CurveID(id)
		}
	case extSupportedPoints:
		list := data.vec8()
		if !list.ok || len(list.b) == 0 {
			return false
		}
		h.SupportedPoints = slices.Clone(list.b)
	case extSignatureAlgorithms:
		list := data.vec16()
		ids := list.u16s()
		if !list.ok || len(ids) == 0 {
			return false
		}
		h.SignatureSchemes = make([]tls.SignatureScheme, len(ids))
		for i, id := range ids {
			h.SignatureSchemes[i] = tls.SignatureScheme(id)
		}
	case extSupportedVersions:
		list := data.vec8()
		vers := list.u16s()
		if !list.ok || len(vers) == 0 {
			return false
		}
		h.SupportedVersions = vers
	default:
		return true
	}
	return data.ok && len(data.b) == 0
}

// versions is what crypto/tls's server takes for the client's versions:
// supported_versions, or every version up to legacy_version without it.
func (h *Hello) versions() []uint16 {
	if h.SupportedVersions != nil {
		return h.SupportedVersions
	}
	var out []uint16
	for _, v := range []uint16{tls.VersionTLS13, tls.VersionTLS12, tls.VersionTLS11, tls.VersionTLS10} {
		if v <= h.Version {
			out = append(out, v)
		}
	}
	return out
}

// TLS13 reports whether a server offering TLS 1.2 and 1.3, as the workers
// do, negotiates TLS 1.3 with this client: crypto/tls picks its own
// preference, the highest.
func (h *Hello) TLS13() bool {
	return slices.Contains(h.versions(), tls.VersionTLS13)
}

// Offers reports whether the client's signature_algorithms lists s.
func (h *Hello) Offers(s tls.SignatureScheme) bool {
	return slices.Contains(h.SignatureSchemes, s)
}

// info is the ClientHelloInfo crypto/tls would give the worker's
// GetCertificate, its cipher suites cut to those the workers offer (the
// worker's tls.Config holds that list; this one has none).
func (h *Hello) info() *tls.ClientHelloInfo {
	suites := slices.DeleteFunc(slices.Clone(h.CipherSuites), func(id uint16) bool {
		return !slices.Contains(CipherSuites, id)
	})
	return &tls.ClientHelloInfo{
		CipherSuites:      suites,
		ServerName:        h.ServerName,
		SupportedCurves:   h.SupportedCurves,
		SupportedPoints:   h.SupportedPoints,
		SignatureSchemes:  h.SignatureSchemes,
		SupportedVersions: h.versions(),
	}
}

// Certificate returns a certificate chain, its first certificate parsed
// (leaf), as Pick takes it: its PrivateKey knows the public key only, like
// the worker's signers, and signs nothing.
func Certificate(chain [][]byte, leaf *x509.Certificate) *tls.Certificate {
	return &tls.Certificate{Certificate: chain, Leaf: leaf, PrivateKey: publicOnly{leaf.PublicKey}}
}

// publicOnly is a crypto.Signer that holds no private key.
type publicOnly struct{ pub crypto.PublicKey }

func (p publicOnly) Public() crypto.PublicKey { return p.pub }

func (publicOnly) Sign(io.Reader, []byte, crypto.SignerOpts) ([]byte, error) {
	return nil, errors.New("clienthello: a certificate for Pick signs nothing")
}

// Pick returns the index of the certificate a handshake presents among a
// listener's certs, its default first: the first that covers the client's
// server name and suits its algorithms, else the default (also without a
// server name, or without a ClientHello Parse read: h nil; and the only
// one, which needs no look at the ClientHello). Each of certs
// is made by Certificate: its key is no crypto.Decrypter, so, as on the
// worker, it is offered no static RSA key exchange.
func Pick(h *Hello, certs []*tls.Certificate) int {
	if h == nil || h.ServerName == "" || len(certs) == 1 {
		return 0
	}
	chi := h.info()
	for i, c := range certs {
		if chi.SupportsCertificate(c) == nil {
			return i
		}
	}
	return 0
}
