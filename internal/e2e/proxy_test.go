package e2e

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The proxy route handler in front of real upstreams: a Go net/http server
// and python3's http.server (docs/DESIGN.md §3.6, §4.3; issue 4).

// echoUpstream is a Go net/http server that answers every request with the
// request's body, and the request's method, path, Host and forwarded
// fields in X-Echo-* headers. It counts the connections it
// accepted.
type echoUpstream struct {
	addr  string
	conns atomic.Int64
}

func startEchoUpstream(tb testing.TB) *echoUpstream {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	return serveEchoUpstream(tb, l)
}

// serveEchoUpstream is startEchoUpstream on l, a TCP or a Unix listener.
func serveEchoUpstream(tb testing.TB, l net.Listener) *echoUpstream {
	e := &echoUpstream{addr: l.Addr().String()}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(rw, err.Error(), http.StatusBadRequest)
				return
			}
			h := rw.Header()
			h.Set("X-Echo-Method", r.Method)
			h.Set("X-Echo-Path", r.URL.RequestURI())
			h.Set("X-Echo-Host", r.Host)
			h.Set("X-Echo-Forwarded-For", strings.Join(r.Header.Values("X-Forwarded-For"), " | "))
			h.Set("X-Echo-Forwarded-Proto", r.Header.Get("X-Forwarded-Proto"))
			h.Set("X-Echo-Forwarded-Host", r.Header.Get("X-Forwarded-Host"))
			h.Set("X-Echo-Forwarded-Port", r.Header.Get("X-Forwarded-Port"))
			h.Set("X-Echo-Forwarded", strings.Join(r.Header.Values("Forwarded"), " | "))
			h.Set("X-Echo-Transfer-Encoding", strings.Join(r.TransferEncoding, ","))
			h.Set("Content-Type", "application/octet-stream")
			rw.Write(body)
		}),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				e.conns.Add(1)
			}
		},
	}
	go srv.Serve(l)
	tb.Cleanup(func() { srv.Close() })
	return e
}

// silentUpstream accepts connections, reads what they send and never
// answers. It reports how many it accepted and the most open at once.
type silentUpstream struct {
	addr               string
	mu                 sync.Mutex
	open, most, accept int
}

func startSilentUpstream(tb testing.TB) *silentUpstream {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	s := &silentUpstream{addr: l.Addr().String()}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.open++
			s.accept++
			s.most = max(s.most, s.open)
			s.mu.Unlock()
			go func() {
				io.Copy(io.Discard, c)
				c.Close()
				s.mu.Lock()
				s.open--
				s.mu.Unlock()
			}()
		}
	}()
	return s
}

func (s *silentUpstream) counts() (accepted, most int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accept, s.most
}

// closedPort is an address on which nothing listens.
func closedPort(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// startPython runs `python3 -m http.server` on 127.0.0.1 serving dir, or
// skips the test when python3 is missing. It returns the address.
func startPython(tb testing.TB, dir string) string {
	tb.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		tb.Skip("python3 not found")
	}
	cmd := exec.Command(py, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory", dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		tb.Skipf("starting python3: %v", err)
	}
	tb.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	port := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		re := regexp.MustCompile(`port (\d+)`)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				port <- m[1]
				break
			}
		}
		io.Copy(io.Discard, out)
	}()
	select {
	case p := <-port:
		return "127.0.0.1:" + p
	case <-time.After(20 * time.Second):
		tb.Fatal("python3 http.server did not report its port within 20s")
	}
	return ""
}

// do sends one request on cl: hdr is extra header lines ("K: v\r\n"); a
// non-nil body is sent with Content-Length, or chunked in 1000-byte chunks.
func (cl *client) do(method, path, hdr string, body []byte, chunked bool) (*http.Response, string, error) {
	cl.c.SetDeadline(time.Now().Add(20 * time.Second))
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: test.example\r\n%s", method, path, hdr)
	switch {
	case chunked:
		b.WriteString("Transfer-Encoding: chunked\r\n\r\n")
		for rest := body; len(rest) > 0; {
			n := min(len(rest), 1000)
			fmt.Fprintf(&b, "%x\r\n%s\r\n", n, rest[:n])
			rest = rest[n:]
		}
		b.WriteString("0\r\n\r\n")
	case body != nil:
		fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n", len(body))
		b.Write(body)
	default:
		b.WriteString("\r\n")
	}
	errc := make(chan error, 1)
	go func() {
		_, err := cl.c.Write(b.Bytes())
		errc <- err
	}()
	resp, rbody, err := readResponse(cl.br, method)
	if werr := <-errc; err == nil && werr != nil {
		err = werr
	}
	return resp, rbody, err
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:8])
}

// proxyConfig proxies /echo/ to echo, /py/ to python, /silent/ to silent
// and /down/ to down; 127.0.0.5 is a trusted proxy.
func proxyConfig(echo, python, silent, down string) string {
	return `
workers {
  count = 2
}
log {
  access_log = false
}
trusted_proxies = ["127.0.0.5"]
upstream "echo" {
  addresses = ["` + echo + `"]
}
upstream "python" {
  addresses = ["` + python + `"]
}
upstream "silent" {
  addresses        = ["` + silent + `"]
  response_timeout = "2s"
  max_connections  = 2
}
upstream "down" {
  addresses       = ["` + down + `"]
  connect_timeout = "1s"
}
route "/echo/" {
  proxy {
    upstream = "echo"
  }
}
route "/py/" {
  proxy {
    upstream = "python"
  }
}
route "/silent/" {
  proxy {
    upstream = "silent"
  }
}
route "/down/" {
  proxy {
    upstream = "down"
  }
}
route "/ok" {
  respond {
    body = "ok\n"
  }
}
`
}

func TestProxy(t *testing.T) {
	const workers = 2
	echo := startEchoUpstream(t)
	pyDir := t.TempDir()
	big := bytes.Repeat([]byte("python served this file.\n"), 12000) // 300 KB
	if err := os.MkdirAll(filepath.Join(pyDir, "py"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pyDir, "py", "file.txt"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	python := startPython(t, pyDir)
	silent := startSilentUpstream(t)
	h := start(t, proxyConfig(echo.addr, python, silent.addr, closedPort(t)))

	t.Run("GET", func(t *testing.T) {
		cl := newClient(t, "127.0.0.2", h.addr)
		resp, body, err := cl.do("GET", "/echo/path?q=1", "", nil, false)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{
			"X-Echo-Method":          "GET",
			"X-Echo-Path":            "/echo/path?q=1",
			"X-Echo-Host":            "test.example",
			"X-Echo-Forwarded-For":   "127.0.0.2",
			"X-Echo-Forwarded-Proto": "http",
		}
		if resp.StatusCode != 200 || body != "" {
			t.Errorf("status %d, body %q; want 200 and no body", resp.StatusCode, body)
		}
		for k, v := range want {
			if got := resp.Header.Get(k); got != v {
				t.Errorf("%s = %q, want %q", k, got, v)
			}
		}
	})

	for _, tt := range []struct {
		name    string
		size    int
		chunked bool
	}{
		{"POST", 1000, false},
		{"POST-512KiB", 512 << 10, false},
		{"POST-chunked", 300 << 10, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cl := newClient(t, "127.0.0.2", h.addr)
			payload := make([]byte, tt.size)
			for i := range payload {
				payload[i] = byte('a' + i%26)
			}
			resp, body, err := cl.do("POST", "/echo/upload", "", payload, tt.chunked)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 200 || resp.Header.Get("X-Echo-Method") != "POST" {
				t.Fatalf("status %d, method %q; want 200, POST", resp.StatusCode, resp.Header.Get("X-Echo-Method"))
			}
			if len(body) != len(payload) || sum([]byte(body)) != sum(payload) {
				t.Errorf("upstream got %d bytes (sha %s), want %d (sha %s)", len(body), sum([]byte(body)), len(payload), sum(payload))
			}
			// The connection is kept for a next request.
			if resp, _, err := cl.do("GET", "/ok", "", nil, false); err != nil || resp.StatusCode != 200 {
				t.Errorf("request after the POST on the same connection: %v", err)
			}
		})
	}

	t.Run("keep-alive-reuse", func(t *testing.T) {
		const n = 50
		before := echo.conns.Load()
		cl := newClient(t, "127.0.0.2", h.addr)
		for i := 0; i < n; i++ {
			resp, _, err := cl.do("GET", fmt.Sprintf("/echo/ka/%d", i), "", nil, false)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("request %d: %v", i, err)
			}
			if resp.Close {
				t.Fatalf("request %d closed the client connection", i)
			}
		}
		used, total := echo.conns.Load()-before, echo.conns.Load()
		t.Logf("%d requests through one client connection used %d new upstream connections; %d in all so far", n, used, total)
		if total > workers*8 {
			t.Errorf("%d upstream connections for %d sequential requests and the subtests before, want at most %d: sequential requests reuse a connection", total, n, workers*8)
		}
	})

	t.Run("forwarded-for", func(t *testing.T) {
		for _, tt := range []struct {
			src, sent, want string
		}{
			// An untrusted peer's own X-Forwarded-For is dropped.
			{"127.0.0.2", "X-Forwarded-For: 198.51.100.7\r\n", "127.0.0.2"},
			{"127.0.0.3", "", "127.0.0.3"},
			// A trusted proxy's list is kept in front of the peer.
			{"127.0.0.5", "X-Forwarded-For: 198.51.100.7, 203.0.113.9\r\n", "198.51.100.7, 203.0.113.9, 127.0.0.5"},
			{"127.0.0.5", "", "127.0.0.5"},
		} {
			cl := newClient(t, tt.src, h.addr)
			resp, _, err := cl.do("GET", "/echo/xff", tt.sent+"X-Forwarded-Proto: https\r\n", nil, false)
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.Header.Get("X-Echo-Forwarded-For"); got != tt.want {
				t.Errorf("from %s with %q: upstream saw X-Forwarded-For %q, want %q", tt.src, tt.sent, got, tt.want)
			}
			// A trusted front's scheme reaches the upstream; an
			// untrusted client's does not.
			wantProto := "http"
			if tt.src == "127.0.0.5" {
				wantProto = "https"
			}
			if got := resp.Header.Get("X-Echo-Forwarded-Proto"); got != wantProto {
				t.Errorf("from %s: upstream saw X-Forwarded-Proto %q, want %q", tt.src, got, wantProto)
			}
		}
	})

	t.Run("python", func(t *testing.T) {
		cl := newClient(t, "127.0.0.2", h.addr)
		for i := 0; i < 3; i++ {
			resp, body, err := cl.do("GET", "/py/file.txt", "", nil, false)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 200 || body != string(big) {
				t.Fatalf("status %d, %d bytes; want 200 and the %d-byte file", resp.StatusCode, len(body), len(big))
			}
		}
		resp, _, err := cl.do("GET", "/py/missing", "", nil, false)
		if err != nil || resp.StatusCode != 404 {
			t.Errorf("missing file: %v, want 404 from python", err)
		}
		resp, _, err = cl.do("POST", "/py/file.txt", "", []byte("x=1"), false)
		if err != nil || resp.StatusCode != 501 {
			t.Errorf("POST to python: %v, want its 501", err)
		}
	})

	t.Run("upstream-down", func(t *testing.T) {
		cl := newClient(t, "127.0.0.2", h.addr)
		resp, body, err := cl.do("GET", "/down/x", "", nil, false)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 502 || !strings.Contains(body, "bad gateway") {
			t.Errorf("status %d, body %q; want 502 with a clear body", resp.StatusCode, body)
		}
		if resp, _, err := cl.do("GET", "/ok", "", nil, false); err != nil || resp.StatusCode != 200 {
			t.Errorf("request after the 502 on the same connection: %v", err)
		}
	})

	t.Run("silent-upstream", func(t *testing.T) { checkSilentUpstream(t, h, silent, workers) })

	t.Run("worker-has-no-network", func(t *testing.T) {
		// Proxying works while every worker is under seccomp in a network
		// namespace of its own with no socket: the upstream connections
		// it uses were dialed by the supervisor in this namespace.
		cl := newClient(t, "127.0.0.2", h.addr)
		for i := 0; i < 4; i++ {
			if resp, _, err := cl.do("GET", "/echo/sandboxed", "", nil, false); err != nil || resp.StatusCode != 200 {
				t.Fatalf("request %d: %v", i, err)
			}
		}
		ourNet, err := os.Readlink("/proc/self/ns/net")
		if err != nil {
			t.Skipf("reading our network namespace: %v", err)
		}
		ours := upstreamSockets(t, "/proc/self/net/tcp", echo.addr)
		held := 0
		for _, w := range h.snapshot().Workers {
			status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", w.PID))
			if err != nil {
				t.Fatalf("worker %d: %v", w.Slot, err)
			}
			if !regexp.MustCompile(`(?m)^Seccomp:\s+2$`).Match(status) {
				t.Errorf("worker %d (pid %d) is not in seccomp filter mode", w.Slot, w.PID)
			}
			theirNet, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", w.PID))
			if err != nil {
				t.Fatalf("worker %d: %v", w.Slot, err)
			}
			if theirNet == ourNet {
				t.Errorf("worker %d shares the supervisor's network namespace %s", w.Slot, ourNet)
			}
			for _, f := range []string{"tcp", "tcp6", "udp", "udp6"} {
				if socks := procNetEntries(t, fmt.Sprintf("/proc/%d/net/%s", w.PID, f)); socks != 0 {
					t.Errorf("worker %d's network namespace has %d %s sockets, want none", w.Slot, socks, f)
				}
			}
			// The upstream connections it keeps idle are sockets of the
			// supervisor's namespace.
			fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", w.PID))
			for _, fd := range fds {
				link, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", w.PID, fd.Name()))
				if ours[link] {
					held++
				}
			}
		}
		if held == 0 {
			t.Errorf("no worker holds an upstream connection of the supervisor's namespace after proxying")
		}
	})
}

// procNetEntries counts the sockets listed in a /proc/net table.
func procNetEntries(tb testing.TB, path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("reading %s: %v", path, err)
	}
	return max(0, len(strings.Split(strings.TrimSpace(string(b)), "\n"))-1)
}

// upstreamSockets returns the "socket:[inode]" names of the established
// connections to addr in a /proc/net/tcp table.
func upstreamSockets(tb testing.TB, path, addr string) map[string]bool {
	ap, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	want := fmt.Sprintf("0100007F:%04X", ap.Port)
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	socks := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 9 && f[2] == want && f[3] == "01" {
			if _, err := strconv.Atoi(f[9]); err == nil {
				socks["socket:["+f[9]+"]"] = true
			}
		}
	}
	return socks
}

// checkSilentUpstream sends six requests at once, from six client addresses,
// to /silent/ (max_connections 2, response_timeout 2s, never answering):
// two connections are held and answered 504 at response_timeout; the other
// four are refused at once with 503, never queued (issue 4, Deliver 3).
// With two workers each holds at most its share, one connection, and the
// requests may all land on one worker: one or two are held.
func checkSilentUpstream(t *testing.T, h *harness, silent *silentUpstream, workers int) {
	const timeout = 2 * time.Second
	type result struct {
		status     int
		retryAfter string
		took       time.Duration
		err        error
	}
	results := make([]result, 6)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := newClient(t, fmt.Sprintf("127.0.0.%d", 10+i), h.addr)
			resp, _, err := cl.do("GET", "/silent/x", "", nil, false)
			r := result{took: time.Since(start), err: err}
			if err == nil {
				r.status, r.retryAfter = resp.StatusCode, resp.Header.Get("Retry-After")
			}
			results[i] = r
		}()
	}
	wg.Wait()
	n504, n503 := 0, 0
	for i, r := range results {
		switch {
		case r.err != nil:
			t.Errorf("client %d: %v", i, r.err)
		case r.status == 504:
			n504++
			if r.took < timeout || r.took > timeout+3*time.Second {
				t.Errorf("client %d: 504 after %v, want at response_timeout %v", i, r.took, timeout)
			}
		case r.status == 503:
			n503++
			if r.took > time.Second || r.retryAfter == "" {
				t.Errorf("client %d: 503 after %v with Retry-After %q, want at once with Retry-After", i, r.took, r.retryAfter)
			}
		default:
			t.Errorf("client %d: status %d after %v", i, r.status, r.took)
		}
	}
	accepted, most := silent.counts()
	t.Logf("results %+v; upstream accepted %d, at most %d open", results, accepted, most)
	if n504+n503 != len(results) || n504 > 2 || n504 < 1 || (workers == 1 && n504 != 2) {
		t.Errorf("%d × 504 and %d × 503, want 2 (one or two with two workers) and the rest", n504, n503)
	}
	if most > 2 {
		t.Errorf("the upstream held %d connections at once, over max_connections 2", most)
	}
	s := h.snapshot()
	if got := counter(t, s, "upstream_refused"); got != uint64(n503) {
		t.Errorf("upstream_refused = %d, want %d", got, n503)
	}
	// The timed-out connections were closed and released: the next
	// request is held again, not refused.
	cl := newClient(t, "127.0.0.16", h.addr)
	resp, _, err := cl.do("GET", "/silent/again", "", nil, false)
	if err != nil || resp.StatusCode != 504 {
		t.Errorf("a request after the timeouts: %v, want 504 (the connections were released)", err)
	}
}

// Over max_connections, a request is refused at once even when every
// request lands on the same worker: the worker's own transport must not
// queue it behind the connections it holds.
func TestProxyRefusesOverMaxConnectionsOneWorker(t *testing.T) {
	silent := startSilentUpstream(t)
	h := start(t, strings.Replace(proxyConfig(startEchoUpstream(t).addr, closedPort(t), silent.addr, closedPort(t)),
		"count = 2", "count = 1", 1))
	checkSilentUpstream(t, h, silent, 1)
}
