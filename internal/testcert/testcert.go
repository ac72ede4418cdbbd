// Package testcert writes self-signed certificates and their keys for
// tests, as the PEM files a TLS listener's configuration names.
package testcert

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// WritePair writes a self-signed certificate for name and its key, an
// RSA 2048 one or an ECDSA P-256 one, as NAME.pem and NAME.key under dir,
// and returns the key.
func WritePair(t testing.TB, dir, name string, rsaKey bool) crypto.Signer {
	t.Helper()
	key := NewKey(t, rsaKey)
	Write(t, dir, name, key)
	return key
}

// NewKey returns a new private key: RSA 2048 when rsaKey, else ECDSA P-256.
func NewKey(t testing.TB, rsaKey bool) crypto.Signer {
	t.Helper()
	var key crypto.Signer
	var err error
	if rsaKey {
		key, err = rsa.GenerateKey(rand.Reader, 2048)
	} else {
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	}
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// Write writes a self-signed certificate for name with key, valid for an
// hour either side of now, and the key, as NAME.pem and NAME.key under dir.
func Write(t testing.TB, dir, name string, key crypto.Signer) {
	t.Helper()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	p8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8}), 0o600); err != nil {
		t.Fatal(err)
	}
}
