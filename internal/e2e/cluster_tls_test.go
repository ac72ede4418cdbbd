package e2e

import (
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/view"
)

// startTLSInstance starts an instance with a TLS listener serving cert,
// sharing the store r under secret (a file; "" shares no ticket keys, and
// nil r no store at all).
func startTLSInstance(t testing.TB, r *redisServer, name string, cert testCert, secret string) *tlsSite {
	t.Helper()
	cluster := ""
	if r != nil {
		extra := ""
		if secret != "" {
			extra = fmt.Sprintf("  secret_file = %q\n", secret)
		}
		cluster = clusterBlock(r, name, extra)
	}
	s := &tlsSite{def: cert}
	s.harness = start(t, fmt.Sprintf(`
listener "https" {
  address = "127.0.0.1:0"
  tls {
    certificate "default" {
      cert = %q
      key  = %q
    }
  }
}
%s
%s`, cert.cert, cert.key, sandboxConfig(docRoot(t)), cluster))
	s.tlsAddr = s.sup.Addrs()[1].String()
	if secret != "" {
		s.waitFor("the shared ticket keys", 20*time.Second, func(s view.Snapshot) bool {
			return s.Cluster != nil && s.Cluster.SharedTickets
		})
	}
	return s
}

// clusterSecret writes a shared secret readable by root only.
func clusterSecret(t testing.TB) string {
	p := filepath.Join(t.TempDir(), "cluster.secret")
	if err := os.WriteFile(p, []byte("e2e-cluster-secret-0123456789abcdef0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// A session made on instance A resumes on instance B, with Go's client and
// openssl's, in TLS 1.2 and 1.3: B's handshake costs no signature.
func TestClusterTLSResumption(t *testing.T) {
	r := startRedis(t)
	secret := clusterSecret(t)
	cert := writeCert(t, t.TempDir(), "default", false, "default.test")
	a := startTLSInstance(t, r, "a", cert, secret)
	b := startTLSInstance(t, r, "b", cert, secret)
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		cfg := &tls.Config{InsecureSkipVerify: true, ServerName: "default.test", MinVersion: v, MaxVersion: v,
			ClientSessionCache: tls.NewLRUClientSessionCache(4)}
		if get(t, a.tlsAddr, cfg, "default.test") {
			t.Fatalf("TLS %x: the first connection resumed", v)
		}
		signs := counter(t, b.snapshot(), "tls_signs")
		if !get(t, b.tlsAddr, cfg, "default.test") {
			t.Errorf("TLS %x: a session from instance A did not resume on B", v)
		}
		if got := counter(t, b.waitFor("B's connection back", 10*time.Second, func(s view.Snapshot) bool { return s.AtWorkers == 0 }), "tls_signs"); got != signs {
			t.Errorf("TLS %x: the resumption on B cost %d signatures", v, got-signs)
		}
	}
	for _, version := range []string{"-tls1_3", "-tls1_2"} {
		sess := filepath.Join(t.TempDir(), "sess.pem")
		out := a.sClient(t, version, "-sess_out", sess)
		if !strings.Contains(out, "New,") || !strings.Contains(out, "HTTP/1.1 200") {
			t.Fatalf("%s on A:\n%s", version, out)
		}
		out = b.sClient(t, version, "-sess_in", sess)
		if !strings.Contains(out, "Reused,") || !strings.Contains(out, "HTTP/1.1 200") {
			t.Errorf("%s: openssl's session from A not reused on B:\n%s", version, out)
		}
	}
}
