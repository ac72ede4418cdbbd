package secrets

import (
	"bytes"
	"crypto"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/clienthello"
	"github.com/gatehouse-dev/gatehouse/internal/testcert"
	"github.com/gatehouse-dev/gatehouse/proto"
)

// A handshake's Grant admits one Sign: with its certificate's key, a hash
// and scheme of that key's type, a digest of the hash's size. Without a
// ClientHello (nil) every scheme of the key's type is granted; a
// ClientHello narrows it to what the client offers.
func TestGrantCheck(t *testing.T) {
	dir := t.TempDir()
	testcert.WritePair(t, dir, "ec.test", false)
	testcert.WritePair(t, dir, "rsa.test", true)
	k, err := Load(keysConfig(t, dir, "ec", "rsa"))
	if err != nil {
		t.Fatal(err)
	}
	l := k.Listener("https")
	if l == nil || k.Listener("other") != nil {
		t.Fatal("listeners")
	}
	i, ec := l.Choose(nil)
	if i != 0 {
		t.Fatalf("without a ClientHello: certificate %d, want the default", i)
	}
	sign := func(key uint32, hash crypto.Hash, pss bool) *proto.Sign {
		return &proto.Sign{KeyId: key, Hash: uint32(hash), Pss: pss, Digest: make([]byte, hash.Size())}
	}
	for _, c := range []struct {
		g    Grant
		m    *proto.Sign
		want string // "": admitted
	}{
		{ec, sign(0, crypto.SHA256, false), ""},
		{ec, sign(0, crypto.SHA512, false), ""},
		{ec, sign(1, crypto.SHA256, false), "presents key 0"},
		{ec, sign(0, crypto.SHA256, true), "cannot use"},
		{ec, sign(0, crypto.MD5, false), "cannot use"},
		{ec, &proto.Sign{Hash: uint32(crypto.SHA256), Digest: []byte{1}}, "1-byte digest"},
		{Grant{}, sign(0, crypto.SHA256, false), "no handshake"},
	} {
		got := c.g.Check(c.m, 7)
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("Sign %v: %q, want %q", c.m, got, c.want)
		}
	}

	// A client that offers TLS 1.3 and names rsa.test: the RSA
	// certificate, PSS only, though it offers PKCS#1 v1.5 for TLS 1.2.
	h, ok := clienthello.Parse(helloBytes(t, &tls.Config{ServerName: "rsa.test"}))
	if !ok {
		t.Fatal("the ClientHello does not parse")
	}
	i, rsa := l.Choose(h)
	if i != 1 {
		t.Fatalf("rsa.test: certificate %d", i)
	}
	if v := rsa.Check(sign(1, crypto.SHA256, true), 7); v != "" {
		t.Errorf("PSS under TLS 1.3: %s", v)
	}
	if v := rsa.Check(sign(1, crypto.SHA256, false), 7); !strings.Contains(v, "cannot use") {
		t.Errorf("PKCS#1 v1.5 under TLS 1.3: %q", v)
	}
}

// recorder is a net.Conn that records what a crypto/tls client writes and
// ends its handshake at the first read.
type recorder struct {
	net.Conn // nil: only the methods below are called
	out      bytes.Buffer
}

func (r *recorder) Write(p []byte) (int, error) { return r.out.Write(p) }
func (r *recorder) Read([]byte) (int, error)    { return 0, errors.New("recorded") }
func (r *recorder) Close() error                { return nil }

// helloBytes is the ClientHello record a crypto/tls client with cfg sends.
func helloBytes(t *testing.T, cfg *tls.Config) []byte {
	t.Helper()
	r := &recorder{}
	cfg.InsecureSkipVerify = true
	tls.Client(r, cfg).Handshake()
	if r.out.Len() == 0 {
		t.Fatal("no ClientHello")
	}
	return r.out.Bytes()
}
