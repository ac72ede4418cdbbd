package secrets

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/tls"
	"fmt"

	"github.com/gatehouse-dev/gatehouse/internal/clienthello"
	"github.com/gatehouse-dev/gatehouse/proto"
)

// A handshake's signature (issue 27: a worker is an adversary). A Sign is
// admitted only for a TLS connection on its first dispatch, at the worker
// that holds it, before its Done, once, with the key of the certificate
// the supervisor chose for it from the ClientHello (Listener.Choose), and
// a hash and scheme the handshake could negotiate with that key: a
// compromised worker gets at most one signature per TLS connection a client
// opened, with the key that connection's handshake presents. The loop keeps
// each connection's Grant, and checks a Sign against it.

// Grant is what the handshake of one connection may still sign with: the
// key of its certificate, and the (hash, scheme) pairs it may sign with as
// a signSet. The zero Grant admits no Sign (no handshake, or its signature
// made). Three bytes, byte-aligned, for the loop's connection record's
// sake: its key id is two bytes, not a uint16.
type Grant struct {
	key   [2]byte
	signs signSet
}

// keyID is the key id of g's certificate.
func (g Grant) keyID() uint16 {
	return uint16(g.key[0]) | uint16(g.key[1])<<8
}

// signSet is a set of the (hash, scheme) pairs a handshake may sign with:
// bit signHashes index, plus signPSS for RSASSA-PSS.
type signSet uint8

// signHashes are the digests a Sign may name, by their bit in a signSet.
var signHashes = [...]crypto.Hash{crypto.SHA256, crypto.SHA384, crypto.SHA512}

const signPSS = 3 // bit offset of the PSS pairs

// signBit is the bit of a Sign's hash and scheme, or 0 for a hash no
// handshake signs with.
func signBit(hash uint32, pss bool) signSet {
	for i, h := range signHashes {
		if uint32(h) == hash {
			if pss {
				i += signPSS
			}
			return 1 << i
		}
	}
	return 0
}

// The signature schemes of RSA and ECDSA keys (RFC 8446 §4.2.3), by the bit
// of their hash and scheme. An ECDSA scheme names its curve for TLS 1.3
// only; TLS 1.2 signs any curve with any of the three hashes.
var (
	rsaSchemes = [...]tls.SignatureScheme{
		tls.PKCS1WithSHA256, tls.PKCS1WithSHA384, tls.PKCS1WithSHA512,
		tls.PSSWithSHA256, tls.PSSWithSHA384, tls.PSSWithSHA512,
	}
	ecdsaSchemes = [...]tls.SignatureScheme{
		tls.ECDSAWithP256AndSHA256, tls.ECDSAWithP384AndSHA384, tls.ECDSAWithP521AndSHA512,
	}
	ecdsaCurves = [...]elliptic.Curve{elliptic.P256(), elliptic.P384(), elliptic.P521()}
)

// handshakeSigns is what a handshake with ClientHello h (nil: one the
// supervisor could not read) may sign with pub: the schemes of pub's type
// that the client offers, those of the TLS version it negotiates with the
// workers (TLS 1.3: PSS for RSA, the curve's own hash for ECDSA). Without h,
// every scheme of pub's type, so that no client's ClientHello can make an
// honest worker's Sign a violation. Ed25519 and other keys: none (workers
// refuse their certificates).
func handshakeSigns(pub crypto.PublicKey, h *clienthello.Hello) signSet {
	var set signSet
	tls13 := h != nil && h.TLS13()
	switch pub := pub.(type) {
	case *rsa.PublicKey:
		for i, sch := range rsaSchemes {
			if h == nil || h.Offers(sch) && (!tls13 || i >= signPSS) {
				set |= 1 << i
			}
		}
	case *ecdsa.PublicKey:
		for i, sch := range ecdsaSchemes {
			if h == nil || h.Offers(sch) && (!tls13 || pub.Curve == ecdsaCurves[i]) {
				set |= 1 << i
			}
		}
	}
	return set
}

// Choose chooses the certificate of a handshake on l with ClientHello h
// (nil: one the supervisor could not read), as crypto/tls would: its index
// in l's certificates, which the worker presents, and the Grant of the
// handshake's one signature with its key.
func (l *Listener) Choose(h *clienthello.Hello) (int, Grant) {
	i := clienthello.Pick(h, l.picks)
	id := l.ids[i]
	return i, Grant{key: [2]byte{byte(id), byte(id >> 8)}, signs: handshakeSigns(l.pubs[i], h)}
}

// Check checks a Sign for connection conn against its Grant; it returns the
// violation, or "".
func (g Grant) Check(m *proto.Sign, conn uint64) string {
	bit := signBit(m.GetHash(), m.GetPss())
	switch {
	case g.signs == 0:
		return fmt.Sprintf("Sign for connection %d, which is in no handshake or has had its signature", conn)
	case m.GetKeyId() != uint32(g.keyID()):
		return fmt.Sprintf("Sign with key %d for connection %d, whose handshake presents key %d", m.GetKeyId(), conn, g.keyID())
	case g.signs&bit == 0:
		return fmt.Sprintf("Sign with hash %d (PSS %v), which the handshake of connection %d cannot use", m.GetHash(), m.GetPss(), conn)
	case len(m.GetDigest()) != crypto.Hash(m.GetHash()).Size():
		return fmt.Sprintf("Sign with a %d-byte digest for a %d-byte hash", len(m.GetDigest()), crypto.Hash(m.GetHash()).Size())
	}
	return ""
}
