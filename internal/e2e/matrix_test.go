package e2e

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The combination matrix: what a site produces, not what one feature needs.
// Every listener kind × every handler × connection mode × response size,
// end to end under the strict sandbox. Each cell checks the status, every
// byte, the forwarded headers the upstream saw, that a kept-alive response
// is not held back by Nagle's algorithm, and at the end that no worker died.
//
// A new listener kind belongs in matrixListeners, a new handler in
// matrixHandlers: the loops below then try it with everything else.

// matrixSizes are the response sizes a page's assets have, from an empty
// body to a large image.
var matrixSizes = []int{0, 13, 8 << 10, 16 << 10, 1 << 20}

// stallBound is the latency a kept-alive request must beat at least once in
// stallTries: Nagle's algorithm holding a segment for the client's delayed
// ACK costs 40 ms every time, a busy machine only now and then.
const (
	stallBound = 35 * time.Millisecond
	stallTries = 5
)

// matrixBody is the deterministic content of a body of n bytes.
func matrixBody(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte((i*7+i/251)%26)
	}
	return b
}

// matrixListener is a listener kind: where it listens and how a client
// reaches it.
type matrixListener struct {
	name  string
	index int // in Supervisor.Addrs, in the configuration's order
	tls   bool
	proxy bool // a PROXY protocol v2 header from the trusted balancer first
}

var matrixListeners = []matrixListener{
	{name: "plain", index: 0},
	{name: "tls", index: 1, tls: true},
	{name: "proxy", index: 2, proxy: true},
	{name: "proxy-tls", index: 3, tls: true, proxy: true},
}

// matrixBalancer is the trusted PROXY protocol peer; matrixClient is the
// client address its header carries.
const matrixBalancer = "127.0.0.5"

var matrixClient = netip.MustParseAddrPort("192.0.2.44:40000")

// matrixHandler is one handler under test: its path for a size, the sizes
// it can produce, and whether the upstream sees the request.
type matrixHandler struct {
	name     string
	path     func(size int) string
	sizes    []int // nil: one size-less request (checked by check)
	upstream bool  // the proxy's upstream records what it saw
	check    func(body []byte) error
}

func matrixHandlers() []matrixHandler {
	sized := func(prefix string) func(int) string {
		return func(n int) string { return fmt.Sprintf("%s%d", prefix, n) }
	}
	return []matrixHandler{
		{name: "static", path: func(n int) string { return fmt.Sprintf("/files/size-%d.bin", n) }, sizes: matrixSizes},
		// A respond body lives in the configuration: up to 16 KiB here.
		{name: "respond", path: sized("/respond/"), sizes: matrixSizes[:4]},
		{name: "proxy", path: sized("/api/size/"), sizes: matrixSizes, upstream: true},
		{name: "stream", path: sized("/stream/size/"), sizes: matrixSizes, upstream: true},
		{name: "embedded", path: sized("/emb/"), sizes: matrixSizes},
		{name: "metrics", path: func(int) string { return "/metrics" }, check: func(b []byte) error {
			if !bytes.Contains(b, []byte("# TYPE gatehouse_")) {
				return fmt.Errorf("no Prometheus text in %.80q", b)
			}
			return nil
		}},
	}
}

// sizedHandler is the embedded handler of the matrix: /emb/N answers N
// bytes of matrixBody.
func sizedHandler(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.Atoi(r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:])
	if err != nil || n < 0 || n > 8<<20 {
		http.Error(w, "bad size", http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Write(matrixBody(n))
}

// matrixUpstream is the application behind the proxy routes: /api/size/N
// and /stream/size/N answer N bytes, a WebSocket upgrade is echoed, and
// the forwarded headers of each request are kept under its X-Matrix-Id.
type matrixUpstream struct {
	addr string
	mu   sync.Mutex
	seen map[string]http.Header
}

func startMatrixUpstream(tb testing.TB) *matrixUpstream {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	u := &matrixUpstream{addr: l.Addr().String(), seen: map[string]http.Header{}}
	srv := &http.Server{Handler: http.HandlerFunc(u.serve)}
	go srv.Serve(l)
	tb.Cleanup(func() { srv.Close() })
	return u
}

func (u *matrixUpstream) serve(w http.ResponseWriter, r *http.Request) {
	if id := r.Header.Get("X-Matrix-Id"); id != "" {
		u.mu.Lock()
		u.seen[id] = r.Header.Clone()
		u.mu.Unlock()
	}
	if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		u.echo(w, r)
		return
	}
	n, err := strconv.Atoi(r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:])
	if err != nil || n < 0 {
		http.Error(w, "bad size", http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(n))
	w.Write(matrixBody(n))
}

// echo answers a WebSocket handshake and echoes data frames until a close.
func (u *matrixUpstream) echo(w http.ResponseWriter, r *http.Request) {
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
		wsAccept(r.Header.Get("Sec-WebSocket-Key")))
	if brw.Flush() != nil {
		return
	}
	for {
		op, p, err := wsReadFrame(brw)
		if err != nil {
			return
		}
		if op == wsClose {
			wsWriteFrame(c, wsClose, p, false)
			return
		}
		if wsWriteFrame(c, op, p, false) != nil {
			return
		}
	}
}

func (u *matrixUpstream) saw(id string) http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.seen[id]
}

// matrixSite is the running gatehouse of the matrix.
type matrixSite struct {
	*harness
	up    *matrixUpstream
	addrs []string // by matrixListener.index
}

func startMatrix(t *testing.T) *matrixSite {
	t.Helper()
	keys := t.TempDir()
	cert := writeCert(t, keys, "site", false, "site.test")
	dir := workerReadableTempDir(t)
	www := filepath.Join(dir, "www")
	if err := os.MkdirAll(www, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range matrixSizes {
		// The route's prefix, /files/, is stripped.
		if err := os.WriteFile(filepath.Join(www, fmt.Sprintf("size-%d.bin", n)), matrixBody(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	up := startMatrixUpstream(t)
	tlsBlock := fmt.Sprintf(`
  tls {
    certificate "site" {
      cert = %q
      key  = %q
    }
  }`, cert.cert, cert.key)
	var routes strings.Builder
	for _, n := range matrixSizes[:4] {
		fmt.Fprintf(&routes, "route \"/respond/%d\" {\n  respond {\n    status = 200\n    body   = %q\n  }\n}\n", n, matrixBody(n))
	}
	h := start(t, fmt.Sprintf(`
listener "https" {
  address = "127.0.0.1:0"%[1]s
}
listener "lb" {
  address        = "127.0.0.1:0"
  proxy_protocol = true
}
listener "lbtls" {
  address        = "127.0.0.1:0"
  proxy_protocol = true%[1]s
}
trusted_proxies = ["%[2]s/32"]
workers {
  count       = 2
  concurrency = 4
}
sandbox {
  mode           = "strict"
  seccomp_action = "kill"
}
upstream "app" {
  addresses = [%[3]q]
}
route "/files/" {
  static {
    root = %[4]q
  }
}
route "/api/" {
  proxy {
    upstream = "app"
  }
}
route "/ws" {
  proxy {
    upstream = "app"
    upgrade  = ["websocket"]
  }
}
route "/stream/" {
  class = "stream"
  proxy {
    upstream = "app"
  }
}
route "/emb/" {
  embedded {
    name = "sized"
  }
}
route "/metrics" {
  metrics {
    allow = ["127.0.0.0/8", "192.0.2.0/24"]
  }
}
%[5]s`, tlsBlock, matrixBalancer, up.addr, www, routes.String()))
	s := &matrixSite{harness: h, up: up}
	for _, a := range h.sup.Addrs() {
		s.addrs = append(s.addrs, a.String())
	}
	if len(s.addrs) != len(matrixListeners) {
		t.Fatalf("%d listeners, want %d", len(s.addrs), len(matrixListeners))
	}
	return s
}

// dial opens a client connection to listener l from src (a plain client)
// or, for a PROXY listener, from the balancer with matrixClient's header.
func (s *matrixSite) dial(t *testing.T, l matrixListener, src string) net.Conn {
	t.Helper()
	addr := s.addrs[l.index]
	var c net.Conn
	if l.proxy {
		tc := dialFrom(t, matrixBalancer, addr)
		if _, err := tc.Write(proxyV2(matrixClient, netip.MustParseAddrPort(addr))); err != nil {
			t.Fatal(err)
		}
		c = tc
	} else {
		c = dialFrom(t, src, addr)
	}
	if l.tls {
		tc := tls.Client(c, &tls.Config{ServerName: "site.test", InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
		tc.SetDeadline(time.Now().Add(10 * time.Second))
		if err := tc.Handshake(); err != nil {
			t.Fatalf("%s: TLS handshake: %v", l.name, err)
		}
		c = tc
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// clientAddr is the address the upstream must be told the client has.
func (l matrixListener) clientAddr(src string) string {
	if l.proxy {
		return matrixClient.Addr().String()
	}
	return src
}

// wantForwarded checks what the upstream saw of request id on listener l.
func (s *matrixSite) wantForwarded(l matrixListener, src, id string) error {
	hdr := s.up.saw(id)
	if hdr == nil {
		return fmt.Errorf("the upstream saw no request %s", id)
	}
	proto := "http"
	if l.tls {
		proto = "https"
	}
	_, port, _ := net.SplitHostPort(s.addrs[l.index])
	for _, want := range [][2]string{
		{"X-Forwarded-Proto", proto},
		{"X-Forwarded-Port", port},
		{"X-Forwarded-For", l.clientAddr(src)},
	} {
		if got := hdr.Get(want[0]); got != want[1] {
			return fmt.Errorf("upstream saw %s %q, want %q", want[0], got, want[1])
		}
	}
	if fwd := hdr.Get("Forwarded"); !strings.Contains(fwd, "proto="+proto) {
		return fmt.Errorf("upstream saw Forwarded %q, want proto=%s", fwd, proto)
	}
	return nil
}

// matrixMode is how a client uses its connection.
type matrixMode struct {
	name    string
	version string // on the request line
	header  string // Connection field, if any
	keep    bool   // the connection stays open: pipeline two requests
}

var matrixModes = []matrixMode{
	{name: "keep-alive", version: "HTTP/1.1", keep: true},
	{name: "close", version: "HTTP/1.1", header: "Connection: close\r\n"},
	{name: "http1.0", version: "HTTP/1.0"},
}

// request is one request's bytes; id tags it for the upstream.
func (m matrixMode) request(path, id string) string {
	return fmt.Sprintf("GET %s %s\r\nHost: site.test\r\nX-Matrix-Id: %s\r\n%s\r\n", path, m.version, id, m.header)
}

func TestCombinationMatrix(t *testing.T) {
	s := startMatrix(t)
	src := 2 // each cell comes from its own client address, 127.0.0.2 on
	for _, l := range matrixListeners {
		for _, hd := range matrixHandlers() {
			sizes := hd.sizes
			if sizes == nil {
				sizes = []int{-1}
			}
			for _, size := range sizes {
				for _, m := range matrixModes {
					name := fmt.Sprintf("%s/%s/%s", l.name, hd.name, m.name)
					if size >= 0 {
						name += fmt.Sprintf("/%dB", size)
					}
					client := fmt.Sprintf("127.0.%d.%d", src/250, 2+src%250)
					src++
					t.Run(name, func(t *testing.T) { s.cell(t, l, hd, m, size, client) })
				}
			}
		}
		t.Run(l.name+"/websocket", func(t *testing.T) { s.wsCell(t, l, "127.0.99.2") })
	}
	checkNoDeaths(t, s.harness)
}

// cell runs one combination: two requests (pipelined when the connection
// is kept alive), each checked, and then kept-alive requests until one
// beats stallBound.
func (s *matrixSite) cell(t *testing.T, l matrixListener, hd matrixHandler, m matrixMode, size int, src string) {
	c := s.dial(t, l, src)
	br := bufio.NewReaderSize(c, 64<<10)
	c.SetDeadline(time.Now().Add(20 * time.Second))
	path := hd.path(size)
	ids := []string{t.Name() + "#1"}
	if m.keep {
		ids = append(ids, t.Name()+"#2")
	}
	var out strings.Builder
	for _, id := range ids {
		out.WriteString(m.request(path, id))
	}
	if _, err := io.WriteString(c, out.String()); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if err := s.response(br, l, hd, size, src, id); err != nil {
			t.Fatalf("request %s: %v", id, err)
		}
	}
	if !m.keep {
		if err := expectEOFFrom(br); err != nil {
			t.Fatalf("after the response: %v", err)
		}
		return
	}
	// Nagle's algorithm holds a small segment until the client has
	// acknowledged the last one, which a client delays 40 ms: a second or
	// third response on a kept-alive connection shows it, every time.
	var took []time.Duration
	for i := range stallTries {
		id := fmt.Sprintf("%s#%d", t.Name(), 3+i)
		start := time.Now()
		if _, err := io.WriteString(c, m.request(path, id)); err != nil {
			t.Fatal(err)
		}
		if err := s.response(br, l, hd, size, src, id); err != nil {
			t.Fatalf("request %s: %v", id, err)
		}
		d := time.Since(start)
		if d < stallBound {
			return
		}
		took = append(took, d)
	}
	t.Fatalf("%d kept-alive requests each took %v or more (Nagle's stall is 40 ms): %v", stallTries, stallBound, took)
}

// response reads and checks one response.
func (s *matrixSite) response(br *bufio.Reader, l matrixListener, hd matrixHandler, size int, src, id string) error {
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodGet})
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("reading the body: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d: %.200q", resp.StatusCode, body)
	}
	switch {
	case hd.check != nil:
		if err := hd.check(body); err != nil {
			return err
		}
	case !bytes.Equal(body, matrixBody(size)):
		return fmt.Errorf("body of %d bytes, want %d bytes of the pattern", len(body), size)
	}
	if hd.upstream {
		return s.wantForwarded(l, src, id)
	}
	return nil
}

// expectEOFFrom reports an error unless the server closes the connection
// with nothing more to read.
func expectEOFFrom(br *bufio.Reader) error {
	b, err := br.ReadByte()
	switch {
	case err == io.EOF:
		return nil
	case err == nil:
		return fmt.Errorf("byte %q after the last response, want the connection closed", b)
	}
	// A TLS connection closed without close_notify is still closed.
	if strings.Contains(err.Error(), "EOF") || strings.Contains(err.Error(), "reset") {
		return nil
	}
	return err
}

// wsCell upgrades to a WebSocket on listener l and echoes messages of
// every size; the upstream must see the listener's scheme.
func (s *matrixSite) wsCell(t *testing.T, l matrixListener, src string) {
	c := s.dial(t, l, src)
	c.SetDeadline(time.Now().Add(20 * time.Second))
	var key [16]byte
	rand.Read(key[:])
	k := base64.StdEncoding.EncodeToString(key[:])
	id := t.Name()
	fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: site.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\nX-Matrix-Id: %s\r\n\r\n", k, id)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodGet})
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-WebSocket-Accept") != wsAccept(k) {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("handshake answered %d %v: %.200q", resp.StatusCode, resp.Header, body)
	}
	if err := s.wantForwarded(l, src, id); err != nil {
		t.Error(err)
	}
	for _, n := range slices.DeleteFunc(slices.Clone(matrixSizes), func(n int) bool { return n == 0 }) {
		p := matrixBody(n)
		if err := wsWriteFrame(c, wsBinary, p, true); err != nil {
			t.Fatalf("sending %d bytes: %v", n, err)
		}
		op, got, err := wsReadFrame(br)
		if err != nil || op != wsBinary || !bytes.Equal(got, p) {
			t.Fatalf("echo of %d bytes: op %d, %d bytes, %v", n, op, len(got), err)
		}
	}
	if err := wsWriteFrame(c, wsClose, []byte{3, 232}, true); err != nil {
		t.Fatal(err)
	}
	if op, _, err := wsReadFrame(br); err != nil || op != wsClose {
		t.Fatalf("close: op %d, %v", op, err)
	}
}
