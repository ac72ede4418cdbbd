package clienthello

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"math/big"
	"net"
	"slices"
	"testing"
	"time"
)

// pipeConn is a net.Conn that reads in and records what is written; a
// handshake on it ends at in's end.
type pipeConn struct {
	in  *bytes.Reader
	out bytes.Buffer
}

func (c *pipeConn) Read(p []byte) (int, error) {
	if c.in == nil {
		return 0, errors.New("no input")
	}
	return c.in.Read(p)
}
func (c *pipeConn) Write(p []byte) (int, error)      { return c.out.Write(p) }
func (c *pipeConn) Close() error                     { return nil }
func (c *pipeConn) LocalAddr() net.Addr              { return nil }
func (c *pipeConn) RemoteAddr() net.Addr             { return nil }
func (c *pipeConn) SetDeadline(time.Time) error      { return nil }
func (c *pipeConn) SetReadDeadline(time.Time) error  { return nil }
func (c *pipeConn) SetWriteDeadline(time.Time) error { return nil }

// clientHello returns the first record a crypto/tls client with cfg sends.
func clientHello(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	c := &pipeConn{}
	tls.Client(c, cfg).Handshake()
	b := c.out.Bytes()
	if len(b) < recordHeader {
		t.Fatalf("the client wrote %d bytes", len(b))
	}
	return b[:recordHeader+(int(b[3])<<8|int(b[4]))]
}

// cryptoTLS returns what crypto/tls's server reads of the ClientHello in
// record, or false where it refuses it.
func cryptoTLS(record []byte) (*tls.ClientHelloInfo, bool) {
	var got *tls.ClientHelloInfo
	stop := errors.New("stop")
	tls.Server(&pipeConn{in: bytes.NewReader(record)}, &tls.Config{
		GetConfigForClient: func(chi *tls.ClientHelloInfo) (*tls.Config, error) {
			got = chi
			return nil, stop
		},
	}).Handshake()
	return got, got != nil
}

// same compares Parse's reading with crypto/tls's.
func same(t *testing.T, h *Hello, chi *tls.ClientHelloInfo) {
	t.Helper()
	switch {
	case !slices.Equal(h.CipherSuites, chi.CipherSuites):
		t.Errorf("cipher suites %x, crypto/tls %x", h.CipherSuites, chi.CipherSuites)
	case h.ServerName != chi.ServerName:
		t.Errorf("server name %q, crypto/tls %q", h.ServerName, chi.ServerName)
	case !slices.Equal(h.SupportedCurves, chi.SupportedCurves):
		t.Errorf("curves %v, crypto/tls %v", h.SupportedCurves, chi.SupportedCurves)
	case !slices.Equal(h.SupportedPoints, chi.SupportedPoints):
		t.Errorf("points %v, crypto/tls %v", h.SupportedPoints, chi.SupportedPoints)
	case !slices.Equal(h.SignatureSchemes, chi.SignatureSchemes):
		t.Errorf("signature schemes %v, crypto/tls %v", h.SignatureSchemes, chi.SignatureSchemes)
	case !slices.Equal(h.versions(), chi.SupportedVersions):
		t.Errorf("versions %x, crypto/tls %x", h.versions(), chi.SupportedVersions)
	}
}

// clientConfigs are ClientHellos of every shape crypto/tls sends.
func clientConfigs() []*tls.Config {
	return []*tls.Config{
		{ServerName: "example.test", InsecureSkipVerify: true},
		{InsecureSkipVerify: true}, // no server name
		{ServerName: "a.example.test", MaxVersion: tls.VersionTLS12, InsecureSkipVerify: true},
		{ServerName: "b.example.test", MinVersion: tls.VersionTLS13, InsecureSkipVerify: true},
		{ServerName: "c.example.test", CurvePreferences: []tls.CurveID{tls.CurveP384}, InsecureSkipVerify: true},
		{ServerName: "d.example.test", CipherSuites: []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA}, MaxVersion: tls.VersionTLS12, InsecureSkipVerify: true},
		{ServerName: "192.0.2.1", InsecureSkipVerify: true}, // an address: no SNI
	}
}

// Parse reads what crypto/tls reads of every ClientHello crypto/tls sends.
func TestParseMatchesCryptoTLS(t *testing.T) {
	for _, cfg := range clientConfigs() {
		rec := clientHello(t, cfg)
		h, ok := Parse(rec)
		chi, goOK := cryptoTLS(rec)
		if !ok || !goOK {
			t.Fatalf("%q: Parse %v, crypto/tls %v", cfg.ServerName, ok, goOK)
		}
		same(t, h, chi)
		if want := cfg.MaxVersion != tls.VersionTLS12; h.TLS13() != want {
			t.Errorf("%q: TLS13 %v", cfg.ServerName, h.TLS13())
		}
	}
}

// record wraps a handshake message into one record.
func record(msg []byte) []byte {
	return append([]byte{recordHandshake, 3, 1, byte(len(msg) >> 8), byte(len(msg))}, msg...)
}

// withExtensions rebuilds a ClientHello record with exts as its extensions.
func withExtensions(t *testing.T, rec []byte, exts []byte) []byte {
	t.Helper()
	msg := rec[recordHeader:]
	r := reader{b: msg[handshakeHeader:], ok: true}
	r.bytes(2 + 32)
	r.vec8()
	r.vec16()
	r.vec8()
	if !r.ok {
		t.Fatal("not a ClientHello")
	}
	head := msg[handshakeHeader : len(msg)-len(r.b)]
	body := append(slices.Clone(head), byte(len(exts)>>8), byte(len(exts)))
	body = append(body, exts...)
	return record(append([]byte{typeClientHello, 0, byte(len(body) >> 8), byte(len(body))}, body...))
}

func ext(typ int, data ...byte) []byte {
	return append([]byte{byte(typ >> 8), byte(typ), byte(len(data) >> 8), byte(len(data))}, data...)
}

func sni(names ...string) []byte {
	var list []byte
	for _, n := range names {
		list = append(list, 0, byte(len(n)>>8), byte(len(n)))
		list = append(list, n...)
	}
	return ext(extServerName, append([]byte{byte(len(list) >> 8), byte(len(list))}, list...)...)
}

// Crafted ClientHellos: Parse refuses what crypto/tls refuses among the
// fields it reads, and reads the same where crypto/tls accepts.
func TestParseCrafted(t *testing.T) {
	base := clientHello(t, &tls.Config{ServerName: "x.test", InsecureSkipVerify: true})
	sigalgs := ext(extSignatureAlgorithms, 0, 2, 0x04, 0x03)
	for _, tc := range []struct {
		name string
		rec  []byte
		ok   bool
	}{
		{"no extensions", withExtensions(t, base, nil), true},
		{"one name", withExtensions(t, base, append(sni("a.test"), sigalgs...)), true},
		{"two host names", withExtensions(t, base, sni("a.test", "b.test")), false},
		{"trailing dot", withExtensions(t, base, sni("a.test.")), false},
		{"empty name", withExtensions(t, base, sni("")), false},
		{"repeated extension", withExtensions(t, base, append(sni("a.test"), sni("b.test")...)), false},
		{"repeated unknown extension", withExtensions(t, base, append(ext(0x4444), ext(0x4444)...)), false},
		{"empty signature algorithms", withExtensions(t, base, ext(extSignatureAlgorithms, 0, 0)), false},
		{"odd signature algorithms", withExtensions(t, base, ext(extSignatureAlgorithms, 0, 1, 4)), false},
		{"trailing bytes in an extension", withExtensions(t, base, ext(extSignatureAlgorithms, 0, 2, 4, 3, 0)), false},
		{"empty versions", withExtensions(t, base, ext(extSupportedVersions, 0)), false},
		{"only TLS 1.2", withExtensions(t, base, append(ext(extSupportedVersions, 2, 3, 3), sigalgs...)), true},
		{"no record", base[:3], false},
		{"continued in the next record", base[:len(base)-10], false},
		{"not a handshake", append([]byte{0x17}, base[1:]...), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, ok := Parse(tc.rec)
			chi, goOK := cryptoTLS(tc.rec)
			if ok != tc.ok || (goOK && !ok) {
				t.Fatalf("Parse %v, want %v (crypto/tls %v)", ok, tc.ok, goOK)
			}
			if goOK {
				same(t, h, chi)
			}
		})
	}
}

// FuzzParse: Parse never panics, and wherever crypto/tls accepts a
// ClientHello, Parse accepts it too and reads the same.
func FuzzParse(f *testing.F) {
	for _, cfg := range clientConfigs() {
		f.Add(clientHello(f, cfg)[recordHeader:])
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		if len(msg) > 1<<14 {
			return
		}
		rec := record(msg)
		h, ok := Parse(rec)
		chi, goOK := cryptoTLS(rec)
		if goOK && !ok {
			t.Fatal("crypto/tls accepts a ClientHello Parse refuses")
		}
		if goOK {
			same(t, h, chi)
		}
		if ok {
			h.TLS13()
			Pick(h, testCerts(t))
		}
	})
}

var certs []*tls.Certificate

// testCerts are an ECDSA certificate for ec.test and an RSA one for
// rsa.test, made once.
func testCerts(t testing.TB) []*tls.Certificate {
	if certs != nil {
		return certs
	}
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	rs, _ := rsa.GenerateKey(rand.Reader, 2048)
	for i, k := range []crypto.Signer{ec, rs} {
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), DNSNames: []string{[]string{"ec.test", "rsa.test"}[i]},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, k.Public(), k)
		if err != nil {
			t.Fatal(err)
		}
		leaf, _ := x509.ParseCertificate(der)
		certs = append(certs, Certificate([][]byte{der}, leaf))
	}
	return certs
}

// Pick chooses as crypto/tls's GetCertificate would: the certificate that
// covers the name and suits the client's algorithms, else the default.
func TestPick(t *testing.T) {
	list := testCerts(t)
	for _, tc := range []struct {
		cfg  *tls.Config
		want int
	}{
		{&tls.Config{ServerName: "ec.test"}, 0},
		{&tls.Config{ServerName: "rsa.test"}, 1},
		{&tls.Config{ServerName: "other.test"}, 0},
		{&tls.Config{}, 0},
		// A TLS 1.2 client that takes only RSA suites gets the RSA
		// certificate, even named for the ECDSA one: none suits.
		{&tls.Config{ServerName: "rsa.test", MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256}}, 1},
		{&tls.Config{ServerName: "ec.test", MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256}}, 0},
	} {
		tc.cfg.InsecureSkipVerify = true
		h, ok := Parse(clientHello(t, tc.cfg))
		if !ok {
			t.Fatal("Parse refused a crypto/tls ClientHello")
		}
		if got := Pick(h, list); got != tc.want {
			t.Errorf("%q: picked %d, want %d", tc.cfg.ServerName, got, tc.want)
		}
	}
	if Pick(nil, list) != 0 {
		t.Error("without a ClientHello: not the default")
	}
}

// The supervisor parses and picks on its loop, once per new TLS
// connection.
func BenchmarkParsePick(b *testing.B) {
	rec := clientHello(b, &tls.Config{ServerName: "rsa.test", InsecureSkipVerify: true})
	list := testCerts(b)
	b.ReportAllocs()
	for b.Loop() {
		h, _ := Parse(rec)
		Pick(h, list)
	}
}
