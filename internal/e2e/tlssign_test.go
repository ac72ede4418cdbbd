package e2e

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/view"
)

// Real workers under the sandbox complete handshakes with P-256 (signed on
// the loop), RSA and P-384 (signed in the supervisor's signing pool)
// certificates, each chosen by the server name, in TLS 1.2 and 1.3: the
// supervisor's choice of the certificate from the ClientHello and the
// worker's agree, and every Sign is admitted (no worker is killed). Each
// full handshake costs one signature; a resumed one none.
func TestTLSSignaturesPerHandshake(t *testing.T) {
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	// A second TLS listener, with a P-384 certificate.
	keys := t.TempDir()
	c384 := writeCertKey(t, keys, "p384", p384, time.Now().Add(24*time.Hour), "p384.test")
	site := startTLS(t, fmt.Sprintf(`
listener "https384" {
  address = "127.0.0.1:0"
  tls {
    certificate "p384" {
      cert = %q
      key  = %q
    }
  }
}
`, c384.cert, c384.key))
	addr384 := site.sup.Addrs()[2].String()
	before := site.snapshot()
	full := 0
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		for _, tc := range []struct{ addr, name, want string }{
			{site.tlsAddr, "default.test", "default.test"},
			{site.tlsAddr, "rsa.test", "rsa.test"},
			{site.tlsAddr, "www.example.test", "*.example.test"},
			{addr384, "p384.test", "p384.test"},
		} {
			get(t, tc.addr, &tls.Config{InsecureSkipVerify: true, ServerName: tc.name, MinVersion: v, MaxVersion: v}, tc.want)
			full++
		}
	}
	// A resumption: a handshake without a signature.
	cache := tls.NewLRUClientSessionCache(4)
	cfg := func() *tls.Config {
		return &tls.Config{InsecureSkipVerify: true, ServerName: "p384.test", ClientSessionCache: cache, MaxVersion: tls.VersionTLS12}
	}
	get(t, addr384, cfg(), "p384.test")
	full++
	if resumed := get(t, addr384, cfg(), "p384.test"); !resumed {
		t.Error("the second connection did not resume")
	}
	after := site.waitFor("every connection back", 10*time.Second, func(snap view.Snapshot) bool { return snap.AtWorkers == 0 })
	signs := counter(t, after, "tls_signs") - counter(t, before, "tls_signs")
	handshakes := counter(t, after, "tls_handshakes") - counter(t, before, "tls_handshakes")
	if int(signs) != full || int(handshakes) != full+1 {
		t.Errorf("%d signatures for %d handshakes, want %d for %d", signs, handshakes, full, full+1)
	}
	if k := counter(t, after, "worker_kills"); k != 0 {
		t.Errorf("%d workers killed", k)
	}
}

// get fetches /ok over TLS with cfg from addr, checks that the server's
// certificate is want's and reports whether the session resumed.
func get(t testing.TB, addr string, cfg *tls.Config, want string) bool {
	t.Helper()
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatalf("%s, TLS %x: %v", cfg.ServerName, cfg.MaxVersion, err)
	}
	defer c.Close()
	st := c.ConnectionState()
	if got := leafName(st.PeerCertificates); got != want {
		t.Errorf("%s: the certificate is %q, want %q", cfg.ServerName, got, want)
	}
	fmt.Fprint(c, "GET /ok HTTP/1.1\r\nHost: "+cfg.ServerName+"\r\nConnection: close\r\n\r\n")
	resp, body, err := readResponse(bufio.NewReader(c), "GET")
	if err != nil || resp.StatusCode != 200 || body != "ok\n" {
		t.Errorf("%s, TLS %x: %v %v %q", cfg.ServerName, cfg.MaxVersion, resp, err, body)
	}
	return st.DidResume
}

func leafName(certs []*x509.Certificate) string {
	if len(certs) == 0 {
		return ""
	}
	return certs[0].DNSNames[0]
}
