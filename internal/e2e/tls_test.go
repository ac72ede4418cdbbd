package e2e

import (
	"bufio"
	"crypto"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testcert"
	"github.com/gatehouse-dev/gatehouse/supervisor/view"
)

// testCert is a self-signed certificate written for one test; its key file
// is readable by root only, as a deployment's would be.
type testCert struct {
	cert, key string // file paths
	der       []byte
}

// writeCert generates a self-signed certificate for names (ECDSA P-256, or
// RSA 2048 when rsaKey) under dir, valid for a day. No key is ever
// committed.
func writeCert(t testing.TB, dir, file string, rsaKey bool, names ...string) testCert {
	t.Helper()
	return writeCertUntil(t, dir, file, rsaKey, time.Now().Add(24*time.Hour), names...)
}

// writeCertUntil is writeCert of a certificate that expires at notAfter.
func writeCertUntil(t testing.TB, dir, file string, rsaKey bool, notAfter time.Time, names ...string) testCert {
	t.Helper()
	return writeCertKey(t, dir, file, testcert.NewKey(t, rsaKey), notAfter, names...)
}

// writeCertKey is writeCertUntil with key.
func writeCertKey(t testing.TB, dir, file string, key crypto.Signer, notAfter time.Time, names ...string) testCert {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: names[0]},
		DNSNames:              names,
		NotBefore:             notAfter.Add(-25 * time.Hour),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	c := testCert{cert: filepath.Join(dir, file+".pem"), key: filepath.Join(dir, file+".key"), der: der}
	if err := os.WriteFile(c.cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), 0o600); err != nil {
		t.Fatal(err)
	}
	return c
}

// tlsSite is a harness with a TLS listener "https" holding three
// certificates: an ECDSA default, an RSA one for rsa.test and an ECDSA one
// for *.example.test.
type tlsSite struct {
	*harness
	tlsAddr            string
	def, rsa, wildcard testCert
}

func startTLS(t *testing.T, extra string) *tlsSite {
	t.Helper()
	return startTLSWith(t, "", extra)
}

// startTLSWith is startTLS with workers added to the workers block.
func startTLSWith(t *testing.T, workers, extra string) *tlsSite {
	t.Helper()
	keys := t.TempDir() // mode 0700: no worker account can search it
	s := &tlsSite{
		def:      writeCert(t, keys, "default", false, "default.test"),
		rsa:      writeCert(t, keys, "rsa", true, "rsa.test"),
		wildcard: writeCert(t, keys, "wildcard", false, "*.example.test"),
	}
	www := docRoot(t)
	s.harness = start(t, fmt.Sprintf(`
listener "https" {
  address = "127.0.0.1:0"
  tls {
    certificate "default" {
      cert = %q
      key  = %q
    }
    certificate "rsa" {
      cert = %q
      key  = %q
    }
    certificate "wildcard" {
      cert = %q
      key  = %q
    }
  }
}
sandbox {
  mode           = "strict"
  seccomp_action = "kill"
}
%s
%s`, s.def.cert, s.def.key, s.rsa.cert, s.rsa.key, s.wildcard.cert, s.wildcard.key,
		strings.Replace(workersDefault(sandboxConfig(www), workers), "workers {\n", "workers {\n"+workers, 1), extra))
	s.tlsAddr = s.sup.Addrs()[1].String()
	return s
}

// workersDefault drops the sandbox configuration's worker count and
// concurrency when workers sets its own.
func workersDefault(cfg, workers string) string {
	if !strings.Contains(workers, "count") {
		return cfg
	}
	return strings.Replace(cfg, "  count       = 2\n  concurrency = 4\n", "", 1)
}

// curl runs curl --http1.1 against the TLS listener as host, trusting ca.
func (s *tlsSite) curl(t *testing.T, host string, ca testCert, path string, args ...string) (string, error) {
	t.Helper()
	_, port, _ := net.SplitHostPort(s.tlsAddr)
	a := append([]string{"-sS", "--http1.1", "--max-time", "10", "--cacert", ca.cert,
		"--resolve", host + ":" + port + ":127.0.0.1", "https://" + host + ":" + port + path}, args...)
	out, err := exec.Command("curl", a...).CombinedOutput()
	return string(out), err
}

// Each server name gets its own certificate, verified by curl against that
// certificate alone; a client without SNI gets the default; the keys stay
// in the supervisor, which signed every full handshake.
func TestTLSCertificatePerSNI(t *testing.T) {
	s := startTLS(t, "")
	signs := counter(t, s.snapshot(), "tls_signs")
	for _, tc := range []struct {
		host string
		ca   testCert
	}{
		{"default.test", s.def},
		{"rsa.test", s.rsa},
		{"www.example.test", s.wildcard},
	} {
		out, err := s.curl(t, tc.host, tc.ca, "/ok")
		if err != nil || out != "ok\n" {
			t.Errorf("curl %s: err %v, output %q", tc.host, err, out)
		}
	}
	// A name no certificate covers, and no name at all: the default.
	for _, name := range []string{"unknown.test", "example.test", ""} {
		c, err := tls.Dial("tcp", s.tlsAddr, &tls.Config{InsecureSkipVerify: true, ServerName: name})
		if err != nil {
			t.Fatal(err)
		}
		if got := c.ConnectionState().PeerCertificates[0].Subject.CommonName; got != "default.test" {
			t.Errorf("server name %q: the certificate is %q, want default.test", name, got)
		}
		c.Close()
	}
	// openssl s_client, by name.
	_, port, _ := net.SplitHostPort(s.tlsAddr)
	out, _ := exec.Command("openssl", "s_client", "-connect", "127.0.0.1:"+port, "-servername", "rsa.test", "-brief").CombinedOutput()
	if !strings.Contains(string(out), "CN = rsa.test") && !strings.Contains(string(out), "CN=rsa.test") {
		t.Errorf("openssl s_client -servername rsa.test:\n%s", out)
	}
	snap := s.snapshot()
	if len(snap.Certificates) != 3 || snap.Certificates[1].Name != "rsa" || snap.Certificates[1].DNSNames[0] != "rsa.test" ||
		snap.Certificates[0].NotAfter.Before(time.Now()) {
		t.Errorf("certificates in the snapshot: %+v", snap.Certificates)
	}
	if got := counter(t, snap, "tls_signs") - signs; got < 5 {
		t.Errorf("the supervisor signed %d handshakes, want at least 5", got)
	}
}

// TLS 1.0 and 1.1 and TLS 1.2 suites without ECDHE or AEAD are refused; TLS
// 1.2 with ECDHE and AEAD and TLS 1.3 are served, with ALPN http/1.1.
func TestTLSVersionsAndSuites(t *testing.T) {
	s := startTLS(t, "")
	for _, v := range []uint16{tls.VersionTLS10, tls.VersionTLS11} {
		c, err := tls.Dial("tcp", s.tlsAddr, &tls.Config{InsecureSkipVerify: true, MinVersion: v, MaxVersion: v})
		if err == nil {
			c.Close()
			t.Errorf("TLS version %x accepted", v)
		}
	}
	for _, suite := range []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA, tls.TLS_RSA_WITH_AES_128_GCM_SHA256} {
		c, err := tls.Dial("tcp", s.tlsAddr, &tls.Config{InsecureSkipVerify: true, ServerName: "rsa.test", MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{suite}})
		if err == nil {
			c.Close()
			t.Errorf("TLS 1.2 suite %s accepted", tls.CipherSuiteName(suite))
		}
	}
	_, port, _ := net.SplitHostPort(s.tlsAddr)
	out, err := exec.Command("openssl", "s_client", "-connect", "127.0.0.1:"+port, "-tls1_2",
		"-cipher", "ECDHE-ECDSA-AES128-SHA256:ECDHE-RSA-AES128-SHA", "-servername", "default.test").CombinedOutput()
	if err == nil {
		t.Errorf("openssl s_client with CBC suites connected:\n%s", out)
	}
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		for _, name := range []string{"default.test", "rsa.test"} {
			c, err := tls.Dial("tcp", s.tlsAddr, &tls.Config{InsecureSkipVerify: true, ServerName: name, MinVersion: v, MaxVersion: v, NextProtos: []string{"h2", "http/1.1"}})
			if err != nil {
				t.Errorf("TLS %x to %s: %v", v, name, err)
				continue
			}
			if p := c.ConnectionState().NegotiatedProtocol; p != "http/1.1" {
				t.Errorf("TLS %x to %s: ALPN %q", v, name, p)
			}
			fmt.Fprint(c, "GET /ok HTTP/1.1\r\nHost: "+name+"\r\n\r\n")
			resp, body, err := readResponse(bufio.NewReader(c), "GET")
			if err != nil || resp.StatusCode != 200 || body != "ok\n" {
				t.Errorf("TLS %x to %s: %v %v %q", v, name, resp, err, body)
			}
			c.Close()
		}
	}
}

// Plain HTTP sent to the TLS listener gets a plaintext 400 that says so,
// and the connection is closed; no worker sees it.
func TestTLSPlainHTTP(t *testing.T) {
	s := startTLS(t, "")
	before := counter(t, s.snapshot(), "dispatches")
	c := dialFrom(t, "127.0.0.2", s.tlsAddr)
	defer c.Close()
	fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, body, err := readResponse(bufio.NewReader(c), "GET")
	if err != nil || resp.StatusCode != 400 || !strings.Contains(body, "plain HTTP request was sent to an HTTPS port") {
		t.Fatalf("plain HTTP: %v %v %q", resp, err, body)
	}
	if _, err := http.ParseTime(resp.Header.Get("Date")); err != nil {
		t.Errorf("plain HTTP: Date %q: %v", resp.Header.Get("Date"), err)
	}
	if err := expectClosed(c, 10*time.Second); err != nil {
		t.Error(err)
	}
	snap := s.snapshot()
	if got := counter(t, snap, "dispatches") - before; got != 0 {
		t.Errorf("%d dispatches for plain HTTP", got)
	}
	if counter(t, snap, "tls_plain_http") != 1 {
		t.Errorf("tls_plain_http = %d", counter(t, snap, "tls_plain_http"))
	}
}

// A ClientHello that stalls part way is held by the dispatcher and closed at
// the first-byte timeout; it never reaches a worker.
func TestTLSPartialClientHello(t *testing.T) {
	s := startTLS(t, "limits {\n  first_byte_timeout = \"1s\"\n}\n")
	before := s.snapshot()
	c := dialFrom(t, "127.0.0.2", s.tlsAddr)
	defer c.Close()
	// A handshake record announcing 512 bytes, of which 40 come.
	c.Write(append([]byte{0x16, 3, 1, 2, 0}, make([]byte, 40)...))
	if err := expectClosed(c, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	after := s.snapshot()
	if got := counter(t, after, "dispatches") - counter(t, before, "dispatches"); got != 0 {
		t.Errorf("%d dispatches for a partial ClientHello", got)
	}
	if got := counter(t, after, "timeout_first_byte") - counter(t, before, "timeout_first_byte"); got != 1 {
		t.Errorf("timeout_first_byte rose by %d, want 1", got)
	}
	// A ClientHello sent in two parts is served once complete.
	hello := clientHello(t, s.tlsAddr)
	c2 := dialFrom(t, "127.0.0.3", s.tlsAddr)
	defer c2.Close()
	c2.Write(hello[:7])
	time.Sleep(100 * time.Millisecond)
	if got := counter(t, s.snapshot(), "dispatches") - counter(t, after, "dispatches"); got != 0 {
		t.Errorf("dispatched after 7 bytes of a ClientHello")
	}
	c2.Write(hello[7:])
	s.waitFor("the completed ClientHello dispatched", 10*time.Second, func(snap view.Snapshot) bool {
		return counter(t, snap, "dispatches") > counter(t, after, "dispatches")
	})
}

// clientHello returns the first record a Go client sends.
func clientHello(t *testing.T, addr string) []byte {
	t.Helper()
	a, b := net.Pipe()
	go func() {
		tls.Client(a, &tls.Config{ServerName: "default.test", InsecureSkipVerify: true}).Handshake()
	}()
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(b, hdr); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	if _, err := io.ReadFull(b, body); err != nil {
		t.Fatal(err)
	}
	a.Close()
	b.Close()
	return append(hdr, body...)
}

// A worker, which parses client bytes, cannot open a private key file, yet
// handshakes with that key work: the supervisor signs.
func TestTLSKeyNotInWorker(t *testing.T) {
	s := startTLS(t, "")
	for _, path := range []string{s.def.key, s.rsa.key, s.def.cert} {
		out, err := s.curl(t, "default.test", s.def, "/attack?try=read&path="+path)
		if err != nil || strings.Contains(out, "SUCCEEDED") || !strings.HasPrefix(out, "E") {
			t.Errorf("a worker opening %s: %v %q", path, err, out)
		}
	}
}

// sClient runs openssl s_client against the TLS listener, sending one
// request that closes the connection, with extra arguments.
func (s *tlsSite) sClient(t *testing.T, args ...string) string {
	t.Helper()
	_, port, _ := net.SplitHostPort(s.tlsAddr)
	cmd := exec.Command("openssl", append([]string{"s_client", "-connect", "127.0.0.1:" + port,
		"-servername", "default.test", "-ign_eof"}, args...)...)
	cmd.Stdin = strings.NewReader("GET /ok HTTP/1.1\r\nHost: default.test\r\nConnection: close\r\n\r\n")
	out, _ := cmd.CombinedOutput()
	return string(out)
}

// A session resumes from its ticket on another worker than the one that
// issued it, without a signature: the supervisor's ticket keys are every
// worker's.
func TestTLSResumptionAcrossWorkers(t *testing.T) {
	s := startTLS(t, "")
	for _, version := range []string{"-tls1_3", "-tls1_2"} {
		sess := filepath.Join(t.TempDir(), "sess.pem")
		// Nothing held: worker 0, the first of two with no connection.
		out := s.sClient(t, version, "-sess_out", sess)
		if !strings.Contains(out, "New,") || !strings.Contains(out, "HTTP/1.1 200") {
			t.Fatalf("%s first connection:\n%s", version, out)
		}
		// Its Done may reach the supervisor after openssl got its answer.
		signs := counter(t, s.waitFor("the first connection back", 10*time.Second, func(snap view.Snapshot) bool {
			return snap.AtWorkers == 0
		}), "tls_signs")
		// Hold a connection at worker 0, so the next goes to worker 1.
		c := dialFrom(t, "127.0.0.2", s.addr)
		fmt.Fprint(c, holdRequest)
		snap := s.waitFor("a connection held", 10*time.Second, func(snap view.Snapshot) bool { return snap.AtWorkers == 1 })
		if snap.Workers[0].Active != 1 {
			t.Fatalf("the held connection is not at the first worker: %+v", snap.Workers)
		}
		out = s.sClient(t, version, "-sess_in", sess)
		if !strings.Contains(out, "Reused,") || !strings.Contains(out, "HTTP/1.1 200") {
			t.Errorf("%s resumption on the other worker:\n%s", version, out)
		}
		if got := counter(t, s.snapshot(), "tls_signs"); got != signs {
			t.Errorf("%s: the resumption cost %d signatures", version, got-signs)
		}
		c.Write([]byte("x"))
		readResponse(bufio.NewReader(c), "POST")
		c.Close()
		s.waitFor("the held connection back", 10*time.Second, func(snap view.Snapshot) bool { return snap.AtWorkers == 0 })
	}
}

// Killing the worker that holds a TLS connection closes that connection
// only: a TLS connection at the other worker is served to its end.
func TestTLSWorkerDeathClosesItsConnectionOnly(t *testing.T) {
	s := startTLS(t, "")
	s.expectDeaths(1)
	var conns []*tls.Conn
	for i, src := range []string{"127.0.0.2", "127.0.0.3"} {
		raw := dialFrom(t, src, s.tlsAddr)
		c := tls.Client(raw, &tls.Config{ServerName: "default.test", InsecureSkipVerify: true})
		defer c.Close()
		fmt.Fprint(c, holdRequest)
		s.waitFor("a TLS connection held", 10*time.Second, func(snap view.Snapshot) bool { return snap.AtWorkers == i+1 })
		conns = append(conns, c)
	}
	snap := s.snapshot()
	if snap.Workers[0].Active != 1 || snap.Workers[1].Active != 1 {
		t.Fatalf("the two connections are not at two workers: %+v", snap.Workers)
	}
	if err := syscall.Kill(snap.Workers[0].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	s.waitFor("the death counted", 10*time.Second, func(snap view.Snapshot) bool { return snap.Counters["worker_deaths"] == 1 })
	served, closed := 0, 0
	for _, c := range conns {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		c.Write([]byte("x"))
		resp, body, err := readResponse(bufio.NewReader(c), "POST")
		switch {
		case err == nil && resp.StatusCode == 200 && body == "held\n":
			served++
		case err != nil:
			closed++
		default:
			t.Errorf("after the kill: %v %q", resp, body)
		}
	}
	if served != 1 || closed != 1 {
		t.Errorf("after killing one worker: %d connections served, %d closed; want 1 and 1", served, closed)
	}
}

// A kept-alive TLS connection is parked in the supervisor between requests,
// holding no worker slot, and each next request goes to the worker holding
// its TLS state without a descriptor: three requests on one connection,
// pipelined requests, and a head split over two records.
func TestTLSKeepAliveParkedWithoutSlot(t *testing.T) {
	s := startTLS(t, "")
	before := s.snapshot()
	raw := dialFrom(t, "127.0.0.2", s.tlsAddr)
	c := tls.Client(raw, &tls.Config{ServerName: "rsa.test", InsecureSkipVerify: true})
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	parked := func(what string) {
		s.waitFor(what, 10*time.Second, func(snap view.Snapshot) bool {
			return snap.AtWorkers == 0 && snap.Conns["idle"] == 1
		})
	}
	get := func(req string, n int) {
		t.Helper()
		fmt.Fprint(c, req)
		for i := 0; i < n; i++ {
			resp, body, err := readResponse(br, "GET")
			if err != nil || resp.StatusCode != 200 || body != "ok\n" || resp.Close {
				t.Fatalf("request %q, response %d: %v %v %q", req, i, resp, err, body)
			}
		}
	}
	for i := 0; i < 3; i++ {
		get("GET /ok HTTP/1.1\r\nHost: rsa.test\r\n\r\n", 1)
		parked(fmt.Sprintf("parked after request %d", i+1))
	}
	// Two requests in one record.
	get("GET /ok HTTP/1.1\r\nHost: rsa.test\r\n\r\nGET /ok HTTP/1.1\r\nHost: rsa.test\r\n\r\n", 2)
	parked("parked after the pipelined requests")
	// A head in two records: the first part stays with the TLS state.
	fmt.Fprint(c, "GET /ok HTTP/1.1\r\n")
	parked("parked with part of a head")
	get("Host: rsa.test\r\n\r\n", 1)
	parked("parked after the split head")
	after := s.snapshot()
	if got := counter(t, after, "accepted") - counter(t, before, "accepted"); got != 1 {
		t.Errorf("%d connections accepted, want 1", got)
	}
	if got := counter(t, after, "tls_affinity") - counter(t, before, "tls_affinity"); got < 4 {
		t.Errorf("%d dispatches by affinity, want at least 4", got)
	}
	if got := counter(t, after, "tls_signs") - counter(t, before, "tls_signs"); got != 1 {
		t.Errorf("%d signatures for one connection", got)
	}
	// curl: three URLs, one connection.
	out, err := s.curl(t, "default.test", s.def, "/ok", "https://default.test:"+portOf(s.tlsAddr)+"/ok", "https://default.test:"+portOf(s.tlsAddr)+"/ok")
	if err != nil || out != "ok\nok\nok\n" {
		t.Errorf("curl, three requests: %v %q", err, out)
	}
	if got := counter(t, s.snapshot(), "accepted") - counter(t, after, "accepted"); got != 1 {
		t.Errorf("curl used %d connections for three requests", got)
	}
}

func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}

// A worker's death closes the idle TLS connections whose state it kept, and
// no other: a TLS connection kept by the other worker and a parked plain
// connection are served after it.
func TestTLSWorkerDeathClosesItsKeptConnections(t *testing.T) {
	s := startTLS(t, "")
	s.expectDeaths(1)
	// Both workers must be ready: the dispatcher picks the least busy
	// ready worker, which is what places A and B on different workers.
	s.waitFor("both workers ready", 20*time.Second, func(snap view.Snapshot) bool {
		return len(snap.Workers) == 2 && snap.Workers[0].State == "ready" && snap.Workers[1].State == "ready"
	})
	dialTLS := func(src string) (*tls.Conn, *bufio.Reader) {
		c := tls.Client(dialFrom(t, src, s.tlsAddr), &tls.Config{ServerName: "default.test", InsecureSkipVerify: true})
		c.SetDeadline(time.Now().Add(20 * time.Second))
		return c, bufio.NewReader(c)
	}
	get := func(c net.Conn, br *bufio.Reader) error {
		fmt.Fprint(c, "GET /ok HTTP/1.1\r\nHost: default.test\r\n\r\n")
		resp, body, err := readResponse(br, "GET")
		if err == nil && (resp.StatusCode != 200 || body != "ok\n") {
			err = fmt.Errorf("%d %q", resp.StatusCode, body)
		}
		return err
	}
	// A: kept by worker 0, the first of two idle workers.
	a, abr := dialTLS("127.0.0.2")
	defer a.Close()
	if err := get(a, abr); err != nil {
		t.Fatal(err)
	}
	// The worker's Done may reach the supervisor after the answer reached
	// us: until A is parked, worker 0 still counts it as active, and the
	// hold below could land on worker 1.
	s.waitFor("A parked", 10*time.Second, func(snap view.Snapshot) bool {
		return snap.AtWorkers == 0 && snap.Conns["idle"] == 1
	})
	// B: kept by worker 1, while a streamed body holds worker 0.
	hold := dialFrom(t, "127.0.0.4", s.addr)
	defer hold.Close()
	fmt.Fprint(hold, holdRequest)
	if snap := s.waitFor("a connection held", 10*time.Second, func(snap view.Snapshot) bool { return snap.AtWorkers == 1 }); snap.Workers[0].Active != 1 {
		t.Fatalf("the held connection is not at worker 0: %+v", snap.Workers)
	}
	b, bbr := dialTLS("127.0.0.3")
	defer b.Close()
	if err := get(b, bbr); err != nil {
		t.Fatal(err)
	}
	hold.Write([]byte("x"))
	hbr := bufio.NewReader(hold)
	if resp, _, err := readResponse(hbr, "POST"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("the held request: %v %v", resp, err)
	}
	snap := s.waitFor("all parked", 10*time.Second, func(snap view.Snapshot) bool {
		return snap.AtWorkers == 0 && snap.Conns["idle"] == 3
	})
	if err := syscall.Kill(snap.Workers[0].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	s.waitFor("the death counted", 10*time.Second, func(snap view.Snapshot) bool { return snap.Counters["worker_deaths"] == 1 })
	// The slot's count of TLS connections held starts again from none.
	if snap := s.snapshot(); snap.Workers[0].TLS != 0 || snap.Workers[1].TLS != 1 {
		t.Errorf("TLS connections held after the death: %d and %d, want 0 and 1", snap.Workers[0].TLS, snap.Workers[1].TLS)
	}
	if err := get(a, abr); err == nil {
		t.Error("the TLS connection kept by the dead worker still works")
	}
	if err := get(b, bbr); err != nil {
		t.Errorf("the TLS connection kept by the other worker: %v", err)
	}
	fmt.Fprint(hold, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, body, err := readResponse(hbr, "GET"); err != nil || resp.StatusCode != 200 || body != "ok\n" {
		t.Errorf("the parked plain connection: %v %v %q", resp, err, body)
	}
}

// New TLS connections go to a worker that can keep them idle under
// workers.tls_max_idle_sessions: four idle connections opened one after
// another, two per worker at a cap of two, all stay open and serve a second
// request (placed by free slots alone, the idle first worker would take
// them all and close the oldest two).
func TestTLSIdleSessionsSpreadUnderCap(t *testing.T) {
	s := startTLSWith(t, "  tls_max_idle_sessions = 2\n", "")
	s.waitFor("both workers ready", 20*time.Second, func(snap view.Snapshot) bool {
		return len(snap.Workers) == 2 && snap.Workers[0].State == "ready" && snap.Workers[1].State == "ready"
	})
	var conns []*tlsKeepAlive
	for i := 0; i < 4; i++ {
		c := dialKeepAlive(t, s, fmt.Sprintf("127.0.0.%d", i+2), "default.test")
		if err := c.get(); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		s.waitFor(fmt.Sprintf("connection %d parked", i), 10*time.Second, func(snap view.Snapshot) bool {
			return snap.AtWorkers == 0 && snap.Conns["idle"] == i+1
		})
		conns = append(conns, c)
	}
	if snap := s.snapshot(); snap.Workers[0].TLS != 2 || snap.Workers[1].TLS != 2 {
		t.Errorf("TLS states held %d and %d, want 2 and 2", snap.Workers[0].TLS, snap.Workers[1].TLS)
	}
	for i, c := range conns {
		if err := c.get(); err != nil {
			t.Errorf("connection %d, second request: %v", i, err)
		}
	}
}
