package e2e

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/adminapi"
	"github.com/gatehouse-dev/gatehouse/supervisor/view"
)

// tlsKeepAlive is a client's kept-alive TLS connection to a tlsSite.
type tlsKeepAlive struct {
	*tls.Conn
	br *bufio.Reader
}

func dialKeepAlive(t *testing.T, s *tlsSite, src, name string) *tlsKeepAlive {
	t.Helper()
	c := tls.Client(dialFrom(t, src, s.tlsAddr), &tls.Config{ServerName: name, InsecureSkipVerify: true})
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	return &tlsKeepAlive{Conn: c, br: bufio.NewReader(c)}
}

// get sends one kept-alive request for /ok and reads its answer.
func (c *tlsKeepAlive) get() error {
	fmt.Fprint(c, "GET /ok HTTP/1.1\r\nHost: default.test\r\n\r\n")
	resp, body, err := readResponse(c.br, "GET")
	switch {
	case err != nil:
		return err
	case resp.StatusCode != 200 || body != "ok\n" || resp.Close:
		return fmt.Errorf("%d %q close=%v", resp.StatusCode, body, resp.Close)
	}
	return nil
}

// Over workers.tls_max_idle_sessions the worker closes its oldest idle TLS
// connection with close_notify; the supervisor sees it close and forgets it,
// and the newer ones keep working. That happens only when every worker is
// at its cap: the first two connections go to worker 0 (the first of two
// idle workers with room), the next two to worker 1, and the fifth, with
// no room anywhere, to worker 0 again, which closes the first.
func TestTLSIdleSessionCap(t *testing.T) {
	s := startTLSWith(t, "  tls_max_idle_sessions = 2\n", "")
	s.waitFor("both workers ready", 20*time.Second, func(snap view.Snapshot) bool {
		return len(snap.Workers) == 2 && snap.Workers[0].State == "ready" && snap.Workers[1].State == "ready"
	})
	var conns []*tlsKeepAlive
	for i, src := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6"} {
		c := dialKeepAlive(t, s, src, "default.test")
		if err := c.get(); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
		want := min(i+1, 4)
		s.waitFor(fmt.Sprintf("%d parked", want), 10*time.Second, func(snap view.Snapshot) bool {
			return snap.AtWorkers == 0 && snap.Conns["idle"] == want
		})
	}
	// The oldest got close_notify: a clean end of the TLS stream.
	conns[0].SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := conns[0].Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("the oldest idle connection over the cap: %d bytes, %v; want close_notify (EOF)", n, err)
	}
	for i, c := range conns[1:] {
		if err := c.get(); err != nil {
			t.Errorf("connection %d under the cap: %v", i+1, err)
		}
	}
}

// workerStates maps each worker's pid to its state.
func workerStates(snap view.Snapshot) map[int]string {
	m := map[int]string{}
	for _, w := range snap.Workers {
		m[w.PID] = w.State
	}
	return m
}

// A reload that replaces the workers drops no TLS connection: the old
// worker holding a kept-alive connection's TLS state keeps serving it
// (draining, taking no new connection) until the client closes it, and
// only then exits; new connections go to the new workers.
func TestTLSReloadKeepsKeptConnections(t *testing.T) {
	s := startTLS(t, "")
	s.waitFor("both workers ready", 20*time.Second, func(snap view.Snapshot) bool {
		return len(snap.Workers) == 2 && snap.Workers[0].State == "ready" && snap.Workers[1].State == "ready"
	})
	old := workerStates(s.snapshot())
	a := dialKeepAlive(t, s, "127.0.0.2", "default.test")
	if err := a.get(); err != nil {
		t.Fatal(err)
	}
	s.waitFor("A parked", 10*time.Second, func(snap view.Snapshot) bool {
		return snap.AtWorkers == 0 && snap.Conns["idle"] == 1
	})
	// A new route: what workers are started with changed, so every worker
	// is replaced.
	src, err := os.ReadFile(s.config)
	if err != nil {
		t.Fatal(err)
	}
	src = append(src, "route \"/new\" {\n  respond {\n    body = \"new\\n\"\n  }\n}\n"...)
	if err := os.WriteFile(s.config, src, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.sup.Reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	replaced := func(draining int) func(view.Snapshot) bool {
		return func(snap view.Snapshot) bool {
			ready, drain := 0, 0
			for pid, st := range workerStates(snap) {
				_, wasOld := old[pid]
				switch {
				case !wasOld && st == "ready":
					ready++
				case wasOld && st == "draining":
					drain++
				default:
					return false
				}
			}
			return ready == 2 && drain == draining
		}
	}
	// One old worker keeps A and drains; the other has left.
	s.waitFor("two new workers, the old one keeping A draining", 30*time.Second, replaced(1))
	for i := 0; i < 3; i++ {
		if err := a.get(); err != nil {
			t.Fatalf("request %d on the TLS connection opened before the reload: %v", i+2, err)
		}
		s.waitFor("A parked again", 10*time.Second, func(snap view.Snapshot) bool {
			return snap.AtWorkers == 0 && snap.Conns["idle"] == 1
		})
	}
	out, err := s.curl(t, "default.test", s.def, "/new")
	if err != nil || out != "new\n" {
		t.Errorf("a new connection after the reload: %v %q", err, out)
	}
	if snap := s.snapshot(); !replaced(1)(snap) {
		t.Errorf("the old worker left while it kept A: %+v", snap.Workers)
	}
	// A closed: its worker keeps nothing and exits, which is no death.
	a.Close()
	s.waitFor("the old worker gone", 30*time.Second, replaced(0))
	if deaths := s.snapshot().Counters["worker_deaths"]; deaths != 0 {
		t.Errorf("%d worker deaths", deaths)
	}
}

// certReloadSite is the gatehouse binary, started as root and running as
// nobody, with a TLS listener whose one certificate the test replaces.
type certReloadSite struct {
	p        *proc
	dir      string
	keys     string // the key directory, nobody's, mode 0700
	tlsAddr  string
	sock     string
	reloaded time.Time // the certificate's load time at the last check
}

// writeCert writes the certificate "default" for names into the key
// directory, readable by the supervisor's account only. The cert it returns
// is a copy, for clients to trust, which later writes leave alone.
func (s *certReloadSite) writeCert(t *testing.T, names ...string) testCert {
	t.Helper()
	c := writeCert(t, s.keys, "default", false, names...)
	for _, f := range []string{c.cert, c.key} {
		if err := os.Chown(f, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(c.cert)
	if err != nil {
		t.Fatal(err)
	}
	c.cert = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(c.cert, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return c
}

// curl fetches /ok from the TLS listener as default.test, trusting ca only.
func (s *certReloadSite) curl(t *testing.T, ca testCert) (string, error) {
	t.Helper()
	port := portOf(s.tlsAddr)
	out, err := exec.Command("curl", "-sS", "--http1.1", "--max-time", "10", "--cacert", ca.cert,
		"--resolve", "default.test:"+port+":127.0.0.1", "https://default.test:"+port+"/ok").CombinedOutput()
	return string(out), err
}

// reload sends SIGHUP and waits until the status shows a reload done after
// the last one: the certificate loaded again, or a failure to load it.
func (s *certReloadSite) reload(t *testing.T) adminapi.Status {
	t.Helper()
	if err := s.p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 400; i++ {
		st := *ctlJSON(t, s.sock, "status").Status
		// New handshakes get the new certificate once the workers that
		// replace the running ones are ready.
		ready, other := 0, 0
		for _, w := range st.Workers {
			switch w.State {
			case "ready":
				ready++
			case "draining":
			default:
				other++
			}
		}
		if ready != 2 || other != 0 {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if len(st.Certificates) == 1 && st.Certificates[0].Loaded.After(s.reloaded) {
			s.reloaded = st.Certificates[0].Loaded
			return st
		}
		if len(st.CertificateErrors) == 1 && st.CertificateErrors[0].Since.After(s.reloaded) {
			s.reloaded = st.CertificateErrors[0].Since
			return st
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no reload seen in the status\n%s", s.p.log())
	return adminapi.Status{}
}

// SIGHUP with replaced certificate files: a new connection gets the new
// certificate, a kept-alive TLS connection opened before keeps working, and
// status, metrics and log follow; a broken file keeps the running
// certificate and is shown until a reload loads it. Real clients (curl,
// crypto/tls), the real binary and signal, no worker death.
func TestTLSCertificateReload(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("started as root, running as nobody, as a deployment would")
	}
	s := &certReloadSite{tlsAddr: opsFreeAddr(t)}
	s.dir = writeConfig(t, "")
	s.keys = filepath.Join(s.dir, "keys")
	s.sock = filepath.Join(s.dir, "admin.sock")
	if err := os.Mkdir(s.keys, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(s.keys, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	first := s.writeCert(t, "default.test")
	f, err := os.OpenFile(filepath.Join(s.dir, "gatehouse.hcl"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, `
user        = "nobody"
worker_user = "65532:65532"
admin {
  socket = "admin.sock"
}
workers {
  count       = 2
  concurrency = 4
}
sandbox {
  mode           = "strict"
  seccomp_action = "kill"
}
listener "https" {
  address = %q
  tls {
    certificate "default" {
      cert = "keys/default.pem"
      key  = "keys/default.key"
    }
  }
}
`, s.tlsAddr)
	f.Close()
	s.p = startBinary(t, s.dir, 0, "-config", "gatehouse.hcl")
	s.p.waitServing(t, "/ok")
	if out, err := s.curl(t, first); err != nil || out != "ok\n" {
		t.Fatalf("before the reload: %v %q", err, out)
	}
	st := *ctlJSON(t, s.sock, "status").Status
	s.reloaded = st.Certificates[0].Loaded

	// A kept-alive connection, opened before the reload.
	raw, err := net.DialTimeout("tcp", s.tlsAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	a := &tlsKeepAlive{Conn: tls.Client(raw, &tls.Config{ServerName: "default.test", InsecureSkipVerify: true})}
	defer a.Close()
	a.SetDeadline(time.Now().Add(60 * time.Second))
	a.br = bufio.NewReader(a)
	if err := a.get(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.ConnectionState().PeerCertificates[0].Raw, first.der) {
		t.Fatal("the first connection did not get the first certificate")
	}

	// Renewed, with one more name.
	second := s.writeCert(t, "default.test", "renewed.test")
	st = s.reload(t)
	if c := st.Certificates[0]; len(st.CertificateErrors) != 0 || !slices.Contains(c.DNSNames, "renewed.test") {
		t.Errorf("status after the renewal: %+v", st)
	}
	if out, err := s.curl(t, second); err != nil || out != "ok\n" {
		t.Errorf("a new connection does not get the new certificate: %v %q", err, out)
	}
	if out, err := s.curl(t, first); err == nil {
		t.Errorf("a new connection still gets the old certificate: %q", out)
	}
	for i := 0; i < 3; i++ {
		if err := a.get(); err != nil {
			t.Fatalf("request %d on the connection opened before the reload: %v", i+2, err)
		}
	}

	// A damaged certificate file: the renewed certificate stays.
	pemPath := filepath.Join(s.keys, "default.pem")
	if err := os.WriteFile(pemPath, []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	logged := len(s.p.log())
	st = s.reload(t)
	// Not "configuration reloaded" after a reload that failed; the line
	// is written before the status shows the failure, and read after.
	l := ""
	for i := 0; i < 250 && !strings.Contains(l, "reload incomplete"); i++ {
		time.Sleep(20 * time.Millisecond)
		l = s.p.log()[logged:]
	}
	if strings.Contains(l, "configuration reloaded") || !strings.Contains(l, "reload incomplete") {
		t.Errorf("the log of a reload whose certificate failed:\n%s", l)
	}
	if len(st.CertificateErrors) != 1 || !st.CertificateErrors[0].Kept || !strings.Contains(st.CertificateErrors[0].Error, pemPath+":1:") {
		t.Errorf("status after a damaged file: %+v", st.CertificateErrors)
	}
	if len(st.Certificates) != 1 || !slices.Contains(st.Certificates[0].DNSNames, "renewed.test") {
		t.Errorf("the running certificate is not listed: %+v", st.Certificates)
	}
	if out, err := s.curl(t, second); err != nil || out != "ok\n" {
		t.Errorf("after a damaged file, the running certificate is not served: %v %q", err, out)
	}
	text := ctl(t, nil, ctlBin(t), "-socket", s.sock, "status")
	if !strings.Contains(text.stdout, "RELOAD FAILED") || !strings.Contains(text.stdout, pemPath+":1:") {
		t.Errorf("gatehousectl status does not show the failure:\n%s", text.stdout)
	}
	if !strings.Contains(s.p.log(), "certificate not loaded; the running one is kept") {
		t.Errorf("the failure is not logged")
	}
	// gatehousectl reload says so too.
	if r := ctl(t, nil, ctlBin(t), "-socket", s.sock, "reload"); r.code != 0 || !strings.Contains(r.stdout+r.stderr, pemPath+":1:") {
		t.Errorf("gatehousectl reload with a damaged file: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if err := a.get(); err != nil {
		t.Errorf("the connection opened before the reloads: %v", err)
	}

	// Repaired: loaded, and the failure is gone.
	third := s.writeCert(t, "default.test", "third.test")
	st = s.reload(t)
	if len(st.CertificateErrors) != 0 || !slices.Contains(st.Certificates[0].DNSNames, "third.test") {
		t.Errorf("status after the repair: %+v", st)
	}
	if out, err := s.curl(t, third); err != nil || out != "ok\n" {
		t.Errorf("after the repair: %v %q", err, out)
	}
	if err := a.get(); err != nil {
		t.Errorf("the connection opened before the reloads, at the end: %v", err)
	}

	// A key its account may not read: the failure names the account.
	s.writeCert(t, "default.test", "unreadable.test")
	keyPath := filepath.Join(s.keys, "default.key")
	if err := os.Chown(keyPath, 0, 0); err != nil {
		t.Fatal(err)
	}
	st = s.reload(t)
	want := "reading as nobody (uid 65534, gid 65534): open " + keyPath + ": permission denied"
	if len(st.CertificateErrors) != 1 || !strings.Contains(st.CertificateErrors[0].Error, want) {
		t.Errorf("status after a key nobody may read: %+v, want %q", st.CertificateErrors, want)
	}
	if len(st.Certificates) != 1 || !slices.Contains(st.Certificates[0].DNSNames, "third.test") {
		t.Errorf("the running certificate is not listed: %+v", st.Certificates)
	}
	if err := os.Chown(keyPath, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if st = s.reload(t); len(st.CertificateErrors) != 0 || !slices.Contains(st.Certificates[0].DNSNames, "unreadable.test") {
		t.Errorf("status once nobody may read the key: %+v", st)
	}
}

// stuckUpstream is a listening socket whose accept queue is full: the
// kernel drops further SYNs, so a dial to it hangs until its timeout.
func stuckUpstream(t *testing.T) (addr string, release func()) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	// A backlog of 0 queues one connection.
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, _ := syscall.Getsockname(fd)
	addr = fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	filler, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond); err == nil {
		c.Close()
		t.Skip("the kernel queued a connection past the backlog; no stuck upstream here")
	}
	var once bool
	release = func() {
		if !once {
			once = true
			filler.Close()
			syscall.Close(fd)
		}
	}
	t.Cleanup(release)
	return addr, release
}

// Signing requests beyond the channel's in-flight cap fail the handshake at
// once, never wait: with the one in-flight slot of each worker held by a
// dial that hangs, TLS clients (curl, openssl s_client) see their handshake
// fail long before the dial's timeout; the rounds are counted as
// OVERLOADED, nothing was signed, no worker died; once the slots are free,
// handshakes work again.
func TestTLSSignOverloadFailsAtOnce(t *testing.T) {
	addr, release := stuckUpstream(t)
	s := startTLSWith(t, "", fmt.Sprintf(`
limits {
  ipc_max_in_flight_requests = 1
}
upstream "stuck" {
  addresses       = [%q]
  connect_timeout = "30s"
}
route "/stuck" {
  proxy {
    upstream = "stuck"
  }
}
`, addr))
	s.waitFor("both workers ready", 20*time.Second, func(snap view.Snapshot) bool {
		return len(snap.Workers) == 2 && snap.Workers[0].State == "ready" && snap.Workers[1].State == "ready"
	})
	// One dial per worker: the least busy worker takes each request.
	var held []net.Conn
	for i, src := range []string{"127.0.0.2", "127.0.0.3"} {
		c := dialFrom(t, src, s.addr)
		defer c.Close()
		fmt.Fprint(c, "GET /stuck HTTP/1.1\r\nHost: x\r\n\r\n")
		held = append(held, c)
		s.waitFor(fmt.Sprintf("dial %d hanging", i+1), 10*time.Second, func(snap view.Snapshot) bool {
			return len(snap.Upstreams) == 1 && snap.Upstreams[0].Dialing == i+1
		})
	}
	if snap := s.snapshot(); snap.Workers[0].Active != 1 || snap.Workers[1].Active != 1 {
		t.Fatalf("the hanging dials are not at both workers: %+v", snap.Workers)
	}
	before := s.snapshot()
	_, port, _ := net.SplitHostPort(s.tlsAddr)
	clients := [][]string{
		{"curl", "-sS", "--http1.1", "--max-time", "25", "-k", "--resolve", "default.test:" + port + ":127.0.0.1", "https://default.test:" + port + "/ok"},
		{"openssl", "s_client", "-connect", "127.0.0.1:" + port, "-servername", "default.test", "-tls1_3"},
		{"openssl", "s_client", "-connect", "127.0.0.1:" + port, "-servername", "rsa.test", "-tls1_2"},
		{"curl", "-sS", "--http1.1", "--max-time", "25", "-k", "--resolve", "rsa.test:" + port + ":127.0.0.1", "https://rsa.test:" + port + "/ok"},
	}
	for _, args := range clients {
		began := time.Now()
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Stdin = strings.NewReader("GET /ok HTTP/1.1\r\nHost: default.test\r\nConnection: close\r\n\r\n")
		out, err := cmd.CombinedOutput()
		took := time.Since(began)
		if err == nil || strings.Contains(string(out), "ok\n") && args[0] == "curl" || strings.Contains(string(out), "HTTP/1.1 200") {
			t.Errorf("%s: a handshake over the in-flight cap succeeded: %v\n%s", args[0], err, out)
		}
		// The dials hang for 30 s: a handshake that waited for a slot
		// would take that long.
		if took > 15*time.Second {
			t.Errorf("%s: the refused handshake took %v", args[0], took)
		}
	}
	after := s.waitFor("the refused rounds counted", 10*time.Second, func(snap view.Snapshot) bool {
		return snap.Counters["round_overloaded"]-before.Counters["round_overloaded"] == uint64(len(clients))
	})
	if got := after.Counters["tls_signs"] - before.Counters["tls_signs"]; got != 0 {
		t.Errorf("%d signatures made over the cap", got)
	}
	// The slots free (the dials fail), handshakes sign again.
	release()
	for _, c := range held {
		c.SetDeadline(time.Now().Add(40 * time.Second))
		if resp, _, err := readResponse(bufio.NewReader(c), "GET"); err != nil || resp.StatusCode < 500 {
			t.Errorf("the request whose dial hung: %v %v", resp, err)
		}
	}
	if out, err := s.curl(t, "default.test", s.def, "/ok"); err != nil || out != "ok\n" {
		t.Errorf("a handshake after the slots freed: %v %q", err, out)
	}
	if got := counter(t, s.snapshot(), "tls_signs") - after.Counters["tls_signs"]; got != 1 {
		t.Errorf("%d signatures for the handshake after", got)
	}
}

// A kept connection whose next request waits for its client's share while
// its worker closes it over tls_max_idle_sessions is then dispatched to
// that worker, which no longer keeps it: the worker hands it back closed,
// and lives. One worker of four slots: it keeps every connection, and a
// client's share is one connection.
func TestTLSIdleCapEvictsWaitingConnection(t *testing.T) {
	s := startTLSWith(t, "  count = 1\n  concurrency = 4\n  tls_max_idle_sessions = 2\n", "")
	s.waitFor("the worker ready", 20*time.Second, func(snap view.Snapshot) bool {
		return len(snap.Workers) == 1 && snap.Workers[0].State == "ready"
	})
	parked := func(what string, atWorkers, idle int) {
		t.Helper()
		s.waitFor(what, 10*time.Second, func(snap view.Snapshot) bool {
			return snap.AtWorkers == atWorkers && snap.Conns["idle"] == idle
		})
	}
	hold := func(c io.Writer, what string, atWorkers, idle int) {
		t.Helper()
		fmt.Fprint(c, holdRequest)
		parked(what, atWorkers, idle)
	}
	// A, then B, both of client .2, A the oldest.
	a := dialKeepAlive(t, s, "127.0.0.2", "default.test")
	if err := a.get(); err != nil {
		t.Fatal(err)
	}
	parked("A parked", 0, 1)
	b := dialKeepAlive(t, s, "127.0.0.2", "default.test")
	if err := b.get(); err != nil {
		t.Fatal(err)
	}
	parked("B parked", 0, 2)
	// B's held request fills client .2's share.
	hold(b, "B held", 1, 1)
	// C, another client: with A, the worker keeps two idle, its cap.
	c := dialKeepAlive(t, s, "127.0.0.7", "default.test")
	if err := c.get(); err != nil {
		t.Fatal(err)
	}
	parked("C parked", 1, 2)
	// A's next request waits for its client's share.
	fmt.Fprint(a, "GET /ok HTTP/1.1\r\nHost: default.test\r\n\r\n")
	s.waitFor("A waiting for its share", 10*time.Second, func(snap view.Snapshot) bool { return snap.Counters["share_waits"] == 1 })
	// B's round ends: the worker keeps B, closes A, the oldest, over the
	// cap, and A is dispatched to it as B's slot frees.
	b.Write([]byte("x"))
	if resp, body, err := readResponse(b.br, "POST"); err != nil || resp.StatusCode != 200 || body != "held\n" {
		t.Fatalf("B: %v %v %q", resp, err, body)
	}
	a.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := a.Read(make([]byte, 1)); err == nil {
		t.Errorf("A, closed over the cap, read %d bytes", n)
	}
	for i, k := range []*tlsKeepAlive{b, c} {
		if err := k.get(); err != nil {
			t.Errorf("kept connection %d after: %v", i, err)
		}
	}
	if snap := s.snapshot(); snap.Counters["worker_deaths"] != 0 || snap.Counters["worker_kills"] != 0 {
		t.Errorf("deaths %d, kills %d", snap.Counters["worker_deaths"], snap.Counters["worker_kills"])
	}
}
