package e2e

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/adminapi"
)

// Binary upgrades (docs/DESIGN.md §11): two gatehouse binaries built from
// this tree with different versions, the running one upgraded to the other
// through gatehousectl while clients keep it busy.

var upgradeBins struct {
	once   sync.Once
	v1, v2 string
	err    error
}

// upgradeBinaries builds gatehouse twice, as versions "up-one" and "up-two".
func upgradeBinaries(t *testing.T) (v1, v2 string) {
	t.Helper()
	upgradeBins.once.Do(func() {
		// A directory the account the supervisor drops to can search.
		dir := filepath.Dir(gatehouseBin)
		if upgradeBins.err = os.Chmod(dir, 0o755); upgradeBins.err != nil {
			return
		}
		for _, b := range []struct {
			path *string
			v    string
		}{{&upgradeBins.v1, "up-one"}, {&upgradeBins.v2, "up-two"}} {
			*b.path = filepath.Join(dir, "gatehouse-"+b.v)
			out, err := exec.Command("go", "build", "-o", *b.path, "-ldflags",
				"-X github.com/gatehouse-dev/gatehouse/internal/version.Version="+b.v,
				"github.com/gatehouse-dev/gatehouse/cmd/gatehouse").CombinedOutput()
			if err != nil {
				upgradeBins.err = fmt.Errorf("building %s: %v\n%s", b.v, err, out)
				return
			}
		}
	})
	if upgradeBins.err != nil {
		t.Fatal(upgradeBins.err)
	}
	return upgradeBins.v1, upgradeBins.v2
}

// upSite is one gatehouse, through its upgrades.
type upSite struct {
	t          *testing.T
	dir, addr  string
	sock       string
	bin        string // the path it was started from
	p          *proc
	mu         sync.Mutex
	pids       []int // every supervisor pid it ran as
	v1, v2     string
	configBody string
}

const upgradeLimits = `
limits {
  max_connections_per_client = 65535
  keep_alive_idle_timeout    = "300s"
  max_queued_connections     = 0
  upgrade_grace              = "5s"
}
workers {
  count       = 2
  concurrency = 16
}
log {
  access_log = false
}
`

// startUpgradeSite runs v1 on a configuration with body and an admin socket.
func startUpgradeSite(t *testing.T, body string) *upSite {
	t.Helper()
	return startUpgradeSiteWith(t, body, opsFreeAddr(t), opsOptions{})
}

// startUpgradeSiteWith is startUpgradeSite on addr, with o's environment
// and descriptors.
func startUpgradeSiteWith(t *testing.T, body, addr string, o opsOptions) *upSite {
	t.Helper()
	v1, v2 := upgradeBinaries(t)
	s := &upSite{t: t, addr: addr, v1: v1, v2: v2}
	s.dir = workerReadableTempDir(t)
	s.sock = filepath.Join(s.dir, "admin.sock")
	s.configBody = body + upgradeLimits + fmt.Sprintf("admin {\n  socket = %q\n}\n", s.sock)
	writeOpsFile(t, s.dir, s.addr, "one\n", s.configBody)
	if o.bin == "" {
		// A path of its own: started as root, gatehouse upgrades only to
		// the binary installed where it was started from.
		o.bin = filepath.Join(s.dir, "gatehouse")
		installAs(t, v1, o.bin)
	}
	s.bin = o.bin
	o.args = []string{"-config", "gatehouse.hcl"}
	s.p = startOps(t, s.dir, o)
	s.p.waitServing(t, "/ok")
	s.pids = []int{s.p.cmd.Process.Pid}
	// Runs before startOps' cleanup, which waits for standard error to
	// close: every process that took over holds it.
	t.Cleanup(s.stopAll)
	return s
}

func (s *upSite) status() *adminapi.Status {
	s.t.Helper()
	return ctlJSON(s.t, s.sock, "status").Status
}

// upgrade installs bin ("": none) at the path the site was started from,
// runs gatehousectl upgrade and checks that a new process of version want
// serves; it returns the old pid.
func (s *upSite) upgrade(bin, want string) int {
	s.t.Helper()
	old := s.status().PID
	if bin != "" {
		installAs(s.t, bin, s.bin)
	}
	args := []string{"-socket", s.sock, "upgrade"}
	r := ctl(s.t, nil, ctlBin(s.t), args...)
	if r.code != 0 {
		s.t.Fatalf("gatehousectl upgrade %s: exit %d: %s%s", bin, r.code, r.stdout, r.stderr)
	}
	st := s.status()
	s.mu.Lock()
	s.pids = append(s.pids, st.PID) // stopAll stops it, whatever follows
	s.mu.Unlock()
	if st.PID == old || st.Version != want {
		s.t.Fatalf("after the upgrade: pid %d version %q, want a new pid (old %d) and version %q", st.PID, st.Version, old, want)
	}
	return old
}

// waitStatus polls the status until cond holds of its upgrade, at most 10 s.
func (s *upSite) waitStatus(what string, cond func(adminapi.Upgrade) bool) {
	s.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		u := s.status().Upgrade
		if cond(u) {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("status never showed %s: %+v", what, u)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitGone waits until pid has exited, at most limit.
func (s *upSite) waitGone(pid int, limit time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(limit)
	for alive(pid) && syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			s.t.Fatalf("old gatehouse %d still running after %v", pid, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stopAll stops every process the site ran as.
func (s *upSite) stopAll() {
	s.mu.Lock()
	pids := append([]int(nil), s.pids...)
	s.mu.Unlock()
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGTERM)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, pid := range pids {
		for alive(pid) && syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// upLoad is continuous load: keep-alive and Connection: close clients,
// counting what succeeded, failed (a request without its 200) and was
// refused (a connection not accepted).
type upLoad struct {
	ok, failed, refused atomic.Int64
	stop                chan struct{}
	wg                  sync.WaitGroup
	mu                  sync.Mutex
	errs                []string
}

func startLoad(addr string, keepAlive, closing int) *upLoad {
	l := &upLoad{stop: make(chan struct{})}
	for i := 0; i < keepAlive+closing; i++ {
		l.wg.Add(1)
		src := fmt.Sprintf("127.0.1.%d", i+1)
		go l.client(addr, src, i < keepAlive)
	}
	return l
}

func (l *upLoad) fail(counter *atomic.Int64, err error) {
	counter.Add(1)
	l.mu.Lock()
	if len(l.errs) < 10 {
		l.errs = append(l.errs, err.Error())
	}
	l.mu.Unlock()
}

func (l *upLoad) client(addr, src string, keepAlive bool) {
	defer l.wg.Done()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	var c net.Conn
	var br *bufio.Reader
	for {
		select {
		case <-l.stop:
			if c != nil {
				c.Close()
			}
			return
		default:
		}
		if c == nil {
			var err error
			if c, err = d.Dial("tcp", addr); err != nil {
				l.fail(&l.refused, err)
				time.Sleep(10 * time.Millisecond)
				continue
			}
			br = bufio.NewReader(c)
		}
		hdr := ""
		if !keepAlive {
			hdr = "Connection: close\r\n"
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		_, err := fmt.Fprintf(c, "GET /ok HTTP/1.1\r\nHost: load\r\n%s\r\n", hdr)
		var resp *http.Response
		var body string
		if err == nil {
			resp, body, err = readResponse(br, "GET")
		}
		switch {
		case err != nil:
			l.fail(&l.failed, fmt.Errorf("from %s: %w", src, err))
		case resp.StatusCode != 200 || body != "ok\n":
			l.fail(&l.failed, fmt.Errorf("from %s: status %d body %q", src, resp.StatusCode, body))
		default:
			l.ok.Add(1)
		}
		if err != nil || !keepAlive || resp.Close {
			c.Close()
			c = nil
		}
	}
}

// end stops the load and checks that nothing failed.
func (l *upLoad) end(t *testing.T) {
	t.Helper()
	close(l.stop)
	l.wg.Wait()
	t.Logf("load: %d requests answered, %d failed, %d connections refused", l.ok.Load(), l.failed.Load(), l.refused.Load())
	if l.failed.Load() != 0 || l.refused.Load() != 0 || l.ok.Load() == 0 {
		t.Errorf("load: %d ok, %d failed, %d refused; first errors: %v", l.ok.Load(), l.failed.Load(), l.refused.Load(), l.errs)
	}
}

// parkConns opens n keep-alive connections that each have had one request
// answered, from 20 client addresses.
func parkConns(t *testing.T, addr string, n int) []*client {
	t.Helper()
	out := make([]*client, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := 0; w < 20; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < n; i += 20 {
				d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(fmt.Sprintf("127.0.2.%d", w+1))}}
				c, err := d.Dial("tcp", addr)
				if err != nil {
					errs <- err
					return
				}
				cl := &client{c: c.(*net.TCPConn), br: bufio.NewReader(c)}
				out[i] = cl
				if resp, body, err := cl.get("/ok"); err != nil || resp.StatusCode != 200 || body != "ok\n" {
					errs <- fmt.Errorf("parked connection %d: %v", i, err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, cl := range out {
			cl.c.Close()
		}
	})
	return out
}

// startAppUpstream serves /upload (reads the body, answers its length) and
// /events (an event every 100 ms, as startSSEUpstream).
func startAppUpstream(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/upload", func(rw http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(rw, "got %d", n)
	})
	mux.HandleFunc("/events", func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(rw)
		for i := 0; i < 600; i++ {
			if _, err := fmt.Fprintf(rw, "data: %d\n\n", i); err != nil || rc.Flush() != nil {
				return
			}
			select {
			case <-r.Context().Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}

const uploadSize = 24 << 10

// slowUpload sends a POST /upload of uploadSize bytes at about 20 KiB/s,
// then, on the same connection, a GET /ok; it reports what went wrong.
func slowUpload(addr, src string, started *sync.WaitGroup) error {
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", addr)
	started.Done()
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: up\r\nContent-Length: %d\r\n\r\n", uploadSize)
	chunk := make([]byte, 2048)
	for sent := 0; sent < uploadSize; sent += len(chunk) {
		if _, err := c.Write(chunk); err != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	br := bufio.NewReader(c)
	resp, body, err := readResponse(br, "POST")
	if err != nil || resp.StatusCode != 200 || body != fmt.Sprintf("got %d", uploadSize) {
		return fmt.Errorf("upload: %v %v %q", err, resp, body)
	}
	fmt.Fprintf(c, "GET /ok HTTP/1.1\r\nHost: up\r\n\r\n")
	if resp, body, err := readResponse(br, "GET"); err != nil || resp.StatusCode != 200 || body != "ok\n" {
		return fmt.Errorf("request after the upload: %v %q", err, body)
	}
	return nil
}

// readEvent reads one SSE event line from a stream.
func readEvent(br *bufio.Reader, c net.Conn) error {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return err
		}
		if strings.HasPrefix(line, "data: ") {
			return nil
		}
	}
}

// expectStreamEnd reads until the connection ends (the old supervisor closed it
// at upgrade_grace), at most 20 s.
func expectStreamEnd(c net.Conn, r io.Reader) error {
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err := io.Copy(io.Discard, r)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return errors.New("still open 20 s after its supervisor exited")
	}
	return nil
}

// TestUpgradeUnderLoad: under continuous keep-alive and Connection: close
// load, with 2000 parked connections, 20 uploads in progress, 20 WebSocket
// echoes and 20 event streams open, three upgrades in a row fail no
// request and refuse no connection; the uploads complete; the streams are
// served on until upgrade_grace closes them; and every parked connection
// is answered afterwards by the last version (the others have exited).
func TestUpgradeUnderLoad(t *testing.T) {
	app := startAppUpstream(t)
	ws := startWSUpstream(t)
	s := startUpgradeSite(t, fmt.Sprintf(`
upstream "app" {
  addresses       = [%q]
  max_connections = 400
}
upstream "ws" {
  addresses       = [%q]
  max_connections = 400
}
route "/upload" {
  proxy {
    upstream = "app"
  }
}
route "/events" {
  class = "stream"
  proxy {
    upstream = "app"
  }
}
route "/ws" {
  proxy {
    upstream = "ws"
    upgrade  = ["websocket"]
  }
}
`, app, ws.addr))
	const parked = 2000
	conns := parkConns(t, s.addr, parked)
	load := startLoad(s.addr, 4, 4)
	versions := []struct{ bin, v string }{{s.v2, "up-two"}, {s.v1, "up-one"}, {s.v2, "up-two"}}
	for round, next := range versions {
		// Streams and uploads of this round, opened at the running version.
		var wss []*wsConn
		var sses []net.Conn
		var sseReaders []*bufio.Reader
		for i := 0; i < 20; i++ {
			src := fmt.Sprintf("127.0.3.%d", i+1)
			w, code := wsDial(t, src, s.addr, "/ws")
			if w == nil {
				t.Fatalf("round %d: WebSocket refused: %d", round, code)
			}
			wss = append(wss, w)
			c := dialFrom(t, src, s.addr)
			t.Cleanup(func() { c.Close() })
			fmt.Fprintf(c, "GET /events HTTP/1.1\r\nHost: test\r\n\r\n")
			br := bufio.NewReader(c)
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("round %d: event stream: %v", round, err)
			}
			sses, sseReaders = append(sses, c), append(sseReaders, bufio.NewReader(resp.Body))
		}
		var started, uploads sync.WaitGroup
		upErrs := make(chan error, 20)
		for i := 0; i < 20; i++ {
			started.Add(1)
			uploads.Add(1)
			go func(i int) {
				defer uploads.Done()
				if err := slowUpload(s.addr, fmt.Sprintf("127.0.4.%d", i+1), &started); err != nil {
					upErrs <- err
				}
			}(i)
		}
		started.Wait()
		time.Sleep(300 * time.Millisecond) // the uploads are under way
		old := s.upgrade(next.bin, next.v)
		if round == 0 {
			// The new version's status shows the old one draining what
			// it kept (the streams, until upgrade_grace).
			s.waitStatus("the old version draining", func(u adminapi.Upgrade) bool {
				return u.OldDraining && u.PeerPID == old && u.Staying > 0 && u.Adopted >= parked
			})
		}
		// The old version still serves what it kept.
		for i, w := range wss {
			if err := w.exchange(wsText, []byte(fmt.Sprintf("after upgrade %d", round))); err != nil {
				t.Errorf("round %d: WebSocket %d not served on by the old version: %v", round, i, err)
			}
		}
		for i := range sses {
			if err := readEvent(sseReaders[i], sses[i]); err != nil {
				t.Errorf("round %d: event stream %d not served on by the old version: %v", round, i, err)
			}
		}
		uploads.Wait()
		close(upErrs)
		for err := range upErrs {
			t.Errorf("round %d: %v", round, err)
		}
		s.waitGone(old, 30*time.Second)
		// upgrade_grace over, the old version closed what it kept.
		for i, w := range wss {
			if err := expectStreamEnd(w.c, w.br); err != nil {
				t.Errorf("round %d: WebSocket %d: %v", round, i, err)
			}
		}
		for i, c := range sses {
			if err := expectStreamEnd(c, sseReaders[i]); err != nil {
				t.Errorf("round %d: event stream %d: %v", round, i, err)
			}
		}
	}
	load.end(t)
	st := s.status()
	if st.Version != "up-two" {
		t.Errorf("version %q after three upgrades", st.Version)
	}
	if st.Upgrade.Adopted < parked {
		t.Errorf("the last version adopted %d connections, want at least the %d parked", st.Upgrade.Adopted, parked)
	}
	// Every earlier version has exited: whatever answers is the last.
	failed := 0
	for i, cl := range conns {
		resp, body, err := cl.get("/ok")
		if err != nil || resp.StatusCode != 200 || body != "ok\n" {
			if failed++; failed <= 5 {
				t.Errorf("parked connection %d after the upgrades: %v", i, err)
			}
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d parked connections not answered after the upgrades", failed, parked)
	}
}

// TestUpgradeFailureKeepsServing: a new binary that exits at start, and a
// configuration error, fail the upgrade: gatehousectl exits non-zero with
// the reason, the running version serves on without a failed request, and
// the status counts both failures.
func TestUpgradeFailureKeepsServing(t *testing.T) {
	s := startUpgradeSite(t, "")
	load := startLoad(s.addr, 4, 4)
	pid := s.status().PID
	// A binary that exits at start, installed where gatehouse was started
	// from (the only path a root start upgrades to).
	installAs(t, "/bin/false", s.bin)
	r := ctl(t, nil, ctlBin(t), "-socket", s.sock, "upgrade")
	if r.code == 0 || !strings.Contains(r.stderr, "exited before it was ready") {
		t.Errorf("upgrade to a binary exiting at start: exit %d, %q", r.code, r.stderr)
	}
	installAs(t, s.v2, s.bin)
	writeOpsFile(t, s.dir, s.addr, "one\n", s.configBody+"\nno_such_key = 1\n")
	r = ctl(t, nil, ctlBin(t), "-socket", s.sock, "upgrade")
	if r.code == 0 || !strings.Contains(r.stderr, "no_such_key") {
		t.Errorf("upgrade with a configuration error: exit %d, %q", r.code, r.stderr)
	}
	time.Sleep(300 * time.Millisecond) // load meanwhile
	load.end(t)
	st := s.status()
	if st.PID != pid || st.Version != "up-one" || st.Upgrade.Failed != 2 {
		t.Errorf("after two failed upgrades: pid %d (was %d), version %q, failed %d", st.PID, pid, st.Version, st.Upgrade.Failed)
	}
	m := ctlJSON(t, s.sock, "metrics").Metrics
	if !strings.Contains(m, "gatehouse_upgrades_failed_total 2") {
		t.Errorf("metrics lack gatehouse_upgrades_failed_total 2")
	}
}

// TestUpgradeKeepsRateLimits: a client over its rate limit stays limited
// across an upgrade; another client is not.
func TestUpgradeKeepsRateLimits(t *testing.T) {
	s := startUpgradeSite(t, `
rate_limit "default" {
  rate  = 1
  per   = "60s"
  burst = 2
}
`)
	limited := newClient(t, "127.0.5.1", s.addr)
	expectStatuses(t, limited, "/ok", nil, 200, 200, 429)
	old := s.upgrade(s.v2, "up-two")
	s.waitGone(old, 30*time.Second)
	expectStatuses(t, newClient(t, "127.0.5.1", s.addr), "/ok", nil, 429)
	expectStatuses(t, newClient(t, "127.0.5.2", s.addr), "/ok", nil, 200)
}

// TestUpgradeUnderSystemd: on a socket-activated listener with a notify
// socket and a watchdog, the old process names the new one (MAINPID=), the
// new one sends READY=1 with its own MAINPID= and pings the watchdog once
// the old one exited, and the inherited socket serves on.
func TestUpgradeUnderSystemd(t *testing.T) {
	ns := newNotifySocket(t)
	// The new process starts as the account the old one dropped to, and
	// connects to the socket itself, as it would to systemd's.
	dir := filepath.Dir(ns.path)
	for _, p := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(ns.path, 0o777); err != nil {
		t.Fatal(err)
	}
	f, addr := listeningFile(t)
	s := startUpgradeSiteWith(t, "", addr, opsOptions{
		env:       []string{"NOTIFY_SOCKET=" + ns.path, "WATCHDOG_USEC=400000", "LISTEN_FDS=1", "LISTEN_FDNAMES=http"},
		fds:       []*os.File{f},
		listenPID: true,
	})
	f.Close()
	ns.expect(t, "READY=1", 20*time.Second)
	old := s.upgrade(s.v2, "up-two")
	pid := s.status().PID
	main := fmt.Sprintf("MAINPID=%d", pid)
	ns.expect(t, main, 10*time.Second)
	if m := ns.expect(t, "READY=1", 10*time.Second); !hasLine(m, main) {
		t.Errorf("READY=1 after the upgrade without %s: %q", main, m)
	}
	s.waitGone(old, 30*time.Second)
	if k := ns.count("WATCHDOG=1", 1500*time.Millisecond); k < 2 {
		t.Errorf("%d WATCHDOG=1 in 1.5 s from the new process, want about 7", k)
	}
	if code, body := opsGet(t, addr, "/ok"); code != 200 || body != "ok\n" {
		t.Errorf("GET /ok on the inherited socket after the upgrade: %d %q", code, body)
	}
	for _, m := range ns.history() {
		if hasLine(m, "STOPPING=1") {
			t.Errorf("STOPPING=1 sent during the upgrade: %q", ns.history())
		}
	}
}

// rawRecorder keeps every byte read from a connection, so a test can see
// the TLS records beneath a tls.Conn.
type rawRecorder struct {
	net.Conn
	mu  sync.Mutex
	got []byte
}

func (r *rawRecorder) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	r.mu.Lock()
	r.got = append(r.got, p[:n]...)
	r.mu.Unlock()
	return n, err
}

// alertSeen reports whether a TLS 1.2 alert record (type 21, in the clear
// header) came on the wire.
func (r *rawRecorder) alertSeen() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for b := r.got; len(b) >= 5; {
		n := 5 + int(b[3])<<8 + int(b[4])
		if b[0] == 21 {
			return true
		}
		if n > len(b) {
			return false
		}
		b = b[n:]
	}
	return false
}

// TestUpgradeClosesTLSWithCloseNotify: a TLS connection's keys stay in the
// old workers, so an upgrade closes a parked one through its worker, with
// close_notify, and the next connection is served by the new version.
func TestUpgradeClosesTLSWithCloseNotify(t *testing.T) {
	tlsAddr := opsFreeAddr(t)
	keys := workerReadableTempDir(t)
	c := writeCert(t, keys, "default", false, "localhost")
	// The new supervisor starts as the account the old one dropped to,
	// which reads the key, as on every reload.
	os.Chmod(c.key, 0o644)
	s := startUpgradeSite(t, fmt.Sprintf(`
listener "https" {
  address = %q
  tls {
    certificate "default" {
      cert = %q
      key  = %q
    }
  }
}
`, tlsAddr, c.cert, c.key))
	raw, err := net.DialTimeout("tcp", tlsAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rec := &rawRecorder{Conn: raw}
	tc := tls.Client(rec, &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12})
	defer tc.Close()
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(tc)
	fmt.Fprintf(tc, "GET /ok HTTP/1.1\r\nHost: localhost\r\n\r\n")
	if resp, body, err := readResponse(br, "GET"); err != nil || resp.StatusCode != 200 || body != "ok\n" {
		t.Fatalf("GET over TLS: %v %q", err, body)
	}
	if rec.alertSeen() {
		t.Fatal("an alert before the upgrade")
	}
	old := s.upgrade(s.v2, "up-two")
	tc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := br.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("the parked TLS connection after the upgrade: %d bytes, %v", n, err)
	}
	if !rec.alertSeen() {
		t.Error("the parked TLS connection was closed without close_notify")
	}
	s.waitGone(old, 30*time.Second)
	tc2, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", tlsAddr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatalf("a new TLS connection after the upgrade: %v", err)
	}
	defer tc2.Close()
	tc2.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(tc2, "GET /ok HTTP/1.1\r\nHost: localhost\r\n\r\n")
	if resp, body, err := readResponse(bufio.NewReader(tc2), "GET"); err != nil || resp.StatusCode != 200 || body != "ok\n" {
		t.Fatalf("GET over TLS after the upgrade: %v %q", err, body)
	}
}

// installAs copies src over dst the way a package manager does: a new file
// renamed into place.
func installAs(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst+".new", b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dst+".new", dst); err != nil {
		t.Fatal(err)
	}
}

// TestUpgradeDefaultPath: without a PATH, gatehousectl upgrade and SIGUSR2
// start the binary now installed at the path gatehouse was started from
// (not /proc/self/exe, the replaced file).
func TestUpgradeDefaultPath(t *testing.T) {
	v1, v2 := upgradeBinaries(t)
	dir := workerReadableTempDir(t)
	bin := filepath.Join(dir, "gatehouse")
	installAs(t, v1, bin)
	s := startUpgradeSiteWith(t, "", opsFreeAddr(t), opsOptions{bin: bin})
	installAs(t, v2, bin)
	s.upgrade("", "up-two")
	installAs(t, v1, bin)
	old := s.status().PID
	if err := syscall.Kill(old, syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for st := s.status(); st.PID == old || st.Version != "up-one"; st = s.status() {
		if time.Now().After(deadline) {
			t.Fatalf("after SIGUSR2: pid %d version %q", st.PID, st.Version)
		}
		time.Sleep(50 * time.Millisecond)
	}
	st := s.status()
	s.mu.Lock()
	s.pids = append(s.pids, st.PID)
	s.mu.Unlock()
	if code, body := opsGet(t, s.addr, "/v"); code != 200 || body != "one\n" {
		t.Errorf("GET /v after two upgrades: %d %q", code, body)
	}
}

// TestUpgradeRootKeepsSeparation: a gatehouse started as root upgrades
// through its root launcher, so the new one separates privileges as a fresh
// start does: the supervisor as user with no capability, its spawner and
// workers as worker_user, a launcher of its own as root. An upgrade to
// another path is refused and the running version serves on.
func TestUpgradeRootKeepsSeparation(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs a start as root")
	}
	s := startUpgradeSite(t, "user = \"nobody\"\nworker_user = \"65532:65532\"\n")
	s.upgrade(s.v2, "up-two")
	pid := s.status().PID
	sup := procStatusFields(t, pid)
	wantFields(t, "new supervisor", sup, map[string]string{"Uid": "65534 65534 65534 65534", "CapEff": "0000000000000000", "NoNewPrivs": "1"})
	var spawners, launchers, workers int
	deadline := time.Now().Add(10 * time.Second)
	for {
		spawners, launchers, workers = 0, 0, 0
		for _, c := range childPIDs(pid) {
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", c))
			uid := uidOf(procStatusFields(t, c))
			switch {
			case strings.Contains(string(cmdline), "\x00spawner"):
				spawners++
				if uid != "65532" {
					t.Errorf("new spawner %d uid %s, want worker_user 65532", c, uid)
				}
				for _, w := range childPIDs(c) {
					if wu := uidOf(procStatusFields(t, w)); wu != "65532" {
						t.Errorf("new worker %d uid %s, want worker_user 65532", w, wu)
					}
					workers++
				}
			case strings.Contains(string(cmdline), "\x00upgrade-launcher"):
				launchers++
				if uid != "0" {
					t.Errorf("new launcher %d uid %s, want root", c, uid)
				}
				// It holds its socket to the supervisor and nothing
				// else of it: no listener, no hand-over socket.
				fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", c))
				for _, fd := range fds {
					if target, _ := os.Readlink(fd); strings.HasPrefix(target, "socket:") && filepath.Base(fd) != "3" {
						t.Errorf("new launcher %d holds %s: %s", c, fd, target)
					}
				}
			default:
				t.Errorf("new supervisor's child %d (uid %s, %q): neither spawner nor launcher", c, uid, cmdline)
			}
		}
		if workers >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st := s.status(); st.Privileges.LauncherPID == 0 || st.Privileges.SpawnerPID == 0 {
		t.Errorf("status after the upgrade: launcher pid %d, spawner pid %d", st.Privileges.LauncherPID, st.Privileges.SpawnerPID)
	}
	if spawners != 1 || launchers != 1 || workers < 2 {
		t.Errorf("new supervisor's children: %d spawners, %d launchers, %d workers; want 1, 1, 2", spawners, launchers, workers)
	}
	r := ctl(t, nil, ctlBin(t), "-socket", s.sock, "status")
	for _, want := range []string{"up-two, pid", "euid 65534", "workers run as 65532:65532", "as root, starts only the binary"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("gatehousectl status after the upgrade lacks %q:\n%s", want, r.stdout)
		}
	}
	// Another path is refused; the running version serves on.
	r = ctl(t, nil, ctlBin(t), "-socket", s.sock, "upgrade", s.v1)
	if r.code == 0 || !strings.Contains(r.stderr, "started as root") {
		t.Errorf("upgrade to another path: exit %d, %q", r.code, r.stderr)
	}
	if st := s.status(); st.PID != pid || st.Version != "up-two" || st.Upgrade.Failed != 1 {
		t.Errorf("after the refused upgrade: pid %d version %q, failed %d, want %d up-two 1", st.PID, st.Version, st.Upgrade.Failed, pid)
	}
	if code, body := opsGet(t, s.addr, "/ok"); code != 200 || body != "ok\n" {
		t.Errorf("GET /ok after the refused upgrade: %d %q", code, body)
	}
}
