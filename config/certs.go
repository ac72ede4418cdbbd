package config

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/gatehouse-dev/gatehouse/sandbox"
)

// KeyPair is a certificate block's files as the supervisor serves them.
type KeyPair struct {
	// Chain is the certificates in DER, leaf first.
	Chain [][]byte
	// Leaf is Chain[0], parsed.
	Leaf *x509.Certificate
	Key  crypto.Signer
}

// minRSABits is the smallest RSA key accepted.
const minRSABits = 2048

// LoadKeyPair reads and checks c's files as the supervisor does at start
// and on every reload; `gatehouse -check` runs the same code. The files are
// read as the account as (nil: the calling process; see
// sandbox.ReadFileAs). It checks that:
//
//   - both files can be read and hold PEM blocks that decode, a CERTIFICATE
//     block that parses and a PRIVATE KEY that is RSA (of minRSABits or
//     more) or ECDSA;
//   - the key matches the first certificate, the leaf;
//   - each certificate is issued and signed by the next, where the
//     signature's algorithm can be checked (not SHA-1).
//
// It returns every problem found, joined (errors.Join), each naming the
// file, and the line of the PEM block at fault. A denied read names as. An
// expired certificate is no error, as for nginx: the caller warns.
func LoadKeyPair(c Certificate, as *sandbox.Account) (*KeyPair, error) {
	var errs []error
	certs, chain, err := readChain(c.Cert, as)
	if err != nil {
		errs = append(errs, err)
	}
	key, keyLine, err := readKey(c.Key, as)
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if !publicKeyEqual(certs[0].cert.PublicKey, key.Public()) {
		// A key that matches a later certificate: the chain is out of
		// order (an intermediate first); say so rather than "mismatch".
		if i := slices.IndexFunc(certs, func(x chainCert) bool { return publicKeyEqual(x.cert.PublicKey, key.Public()) }); i > 0 {
			errs = append(errs, fmt.Errorf("the key in %s:%d matches certificate %d of %s (line %d, %s), not the first: the leaf certificate must come first, then the certificates that issued it",
				c.Key, keyLine, i+1, c.Cert, certs[i].line, certs[i].cert.Subject))
		} else {
			errs = append(errs, fmt.Errorf("the key in %s:%d does not match the certificate in %s:%d (%s)", c.Key, keyLine, c.Cert, certs[0].line, certs[0].cert.Subject))
		}
	}
	for i := 0; i+1 < len(certs); i++ {
		if err := issuedBy(certs[i].cert, certs[i+1].cert); err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: certificate %d (%s) is not issued by certificate %d (%s, line %d), which follows it: %v; a chain goes leaf first, each certificate followed by the one that issued it",
				c.Cert, certs[i].line, i+1, certs[i].cert.Subject, i+2, certs[i+1].cert.Subject, certs[i+1].line, err))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &KeyPair{Chain: chain, Leaf: certs[0].cert, Key: key}, nil
}

// chainCert is a parsed certificate and the line of its PEM block.
type chainCert struct {
	cert *x509.Certificate
	line int
}

// readChain reads the certificates of a chain file, in order.
func readChain(path string, as *sandbox.Account) ([]chainCert, [][]byte, error) {
	blocks, err := readPEM(path, as)
	if err != nil {
		return nil, nil, err
	}
	var certs []chainCert
	var chain [][]byte
	for _, b := range blocks {
		if b.Type != "CERTIFICATE" {
			continue
		}
		x, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, nil, fmt.Errorf("%s:%d: a CERTIFICATE block that does not parse: %w", path, b.line, err)
		}
		certs = append(certs, chainCert{x, b.line})
		chain = append(chain, b.Bytes)
	}
	if len(certs) == 0 {
		return nil, nil, fmt.Errorf("%s: no CERTIFICATE block", path)
	}
	return certs, chain, nil
}

// readKey reads the first private key of a key file and the line of its
// block.
func readKey(path string, as *sandbox.Account) (crypto.Signer, int, error) {
	blocks, err := readPEM(path, as)
	if err != nil {
		return nil, 0, err
	}
	i := slices.IndexFunc(blocks, func(b pemBlock) bool { return strings.HasSuffix(b.Type, "PRIVATE KEY") })
	if i < 0 {
		return nil, 0, fmt.Errorf("%s: no PRIVATE KEY block", path)
	}
	key, err := parseKey(blocks[i].Bytes)
	if err != nil {
		return nil, 0, fmt.Errorf("%s:%d: %w", path, blocks[i].line, err)
	}
	if rk, ok := key.(*rsa.PrivateKey); ok && rk.N.BitLen() < minRSABits {
		return nil, 0, fmt.Errorf("%s:%d: an RSA key of %d bits (%d or more are accepted)", path, blocks[i].line, rk.N.BitLen(), minRSABits)
	}
	return key, blocks[i].line, nil
}

// issuedBy reports why parent did not issue child, or nil. A signature
// whose algorithm crypto/x509 does not check (SHA-1, unsupported) is taken
// on trust once the names match.
func issuedBy(child, parent *x509.Certificate) error {
	if !bytes.Equal(child.RawIssuer, parent.RawSubject) {
		return fmt.Errorf("its issuer is %s", child.Issuer)
	}
	err := parent.CheckSignature(child.SignatureAlgorithm, child.RawTBSCertificate, child.Signature)
	var insecure x509.InsecureAlgorithmError
	if err == nil || errors.As(err, &insecure) || errors.Is(err, x509.ErrUnsupportedAlgorithm) {
		return nil
	}
	return fmt.Errorf("its signature does not verify with that certificate's key (%v)", err)
}

// publicKeyEqual reports whether two public keys are the same key.
func publicKeyEqual(a, b crypto.PublicKey) bool {
	k, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && k.Equal(b)
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

// readPEM reads every PEM block of a file as the account as. A block that
// does not decode (a damaged base64 body, a missing END line) is an error
// naming its line.
func readPEM(path string, as *sandbox.Account) ([]pemBlock, error) {
	data, err := sandbox.ReadFileAs(as, path)
	if err != nil {
		if as != nil && errors.Is(err, fs.ErrPermission) {
			return nil, fmt.Errorf("reading as %s: %w", as, err)
		}
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
