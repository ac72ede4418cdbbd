package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/view"
)

// WebSocket through the proxy (docs/DESIGN.md §10; issue 14): a minimal
// RFC 6455 echo server and client written here with the standard library,
// so the relay is checked against the real handshake and framing.

const wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// WebSocket opcodes used here.
const (
	wsText   = 1
	wsBinary = 2
	wsClose  = 8
)

func wsAccept(key string) string {
	sum := sha1.Sum([]byte(key + wsGUID))
	return base64.StdEncoding.EncodeToString(sum[:])
}

// wsWriteFrame writes one final frame; a client masks, a server does not.
func wsWriteFrame(w io.Writer, op byte, payload []byte, mask bool) error {
	var hdr []byte
	hdr = append(hdr, 0x80|op)
	mbit := byte(0)
	if mask {
		mbit = 0x80
	}
	switch n := len(payload); {
	case n < 126:
		hdr = append(hdr, mbit|byte(n))
	case n <= 0xffff:
		hdr = append(hdr, mbit|126, byte(n>>8), byte(n))
	default:
		hdr = append(hdr, mbit|127)
		hdr = binary.BigEndian.AppendUint64(hdr, uint64(n))
	}
	body := payload
	if mask {
		var key [4]byte
		rand.Read(key[:])
		hdr = append(hdr, key[:]...)
		body = make([]byte, len(payload))
		for i := range payload {
			body[i] = payload[i] ^ key[i%4]
		}
	}
	_, err := w.Write(append(hdr, body...))
	return err
}

// wsReadFrame reads one frame (unmasking it) up to 1 MiB.
func wsReadFrame(r io.Reader) (op byte, payload []byte, err error) {
	var h [2]byte
	if _, err = io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	op = h[0] & 0x0f
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		if _, err = io.ReadFull(r, b[:]); err != nil {
			return 0, nil, err
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err = io.ReadFull(r, b[:]); err != nil {
			return 0, nil, err
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	if n > 1<<20 {
		return 0, nil, fmt.Errorf("frame of %d bytes", n)
	}
	var key [4]byte
	masked := h[1]&0x80 != 0
	if masked {
		if _, err = io.ReadFull(r, key[:]); err != nil {
			return 0, nil, err
		}
	}
	payload = make([]byte, n)
	if _, err = io.ReadFull(r, payload); err != nil {
		return 0, nil, err
	}
	if masked {
		for i := range payload {
			payload[i] ^= key[i%4]
		}
	}
	return op, payload, nil
}

// wsUpstream is a WebSocket echo server: it echoes every data frame, answers
// a close frame with one and closes, closes on its own on the text message
// "bye", greets with the text message "hello" in the 101's write when the
// request has X-Test-Greet, and answers a request without Upgrade 426. It counts the upgraded
// connections open and can drop them all at once (the app dies).
type wsUpstream struct {
	addr     string
	open     atomic.Int64
	upgrades atomic.Int64
	plain    atomic.Int64 // requests that arrived without Upgrade
	mu       sync.Mutex
	conns    map[net.Conn]bool
}

func startWSUpstream(tb testing.TB) *wsUpstream {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	return serveWSUpstream(tb, l)
}

// serveWSUpstream is startWSUpstream on l, a TCP or a Unix listener.
func serveWSUpstream(tb testing.TB, l net.Listener) *wsUpstream {
	u := &wsUpstream{addr: l.Addr().String(), conns: map[net.Conn]bool{}}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go u.serve(c)
		}
	}()
	tb.Cleanup(func() { l.Close(); u.kill() })
	return u
}

func (u *wsUpstream) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	if !strings.EqualFold(req.Header.Get("Upgrade"), "websocket") {
		u.plain.Add(1)
		io.WriteString(c, "HTTP/1.1 426 Upgrade Required\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		return
	}
	head := fmt.Appendf(nil, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
		wsAccept(req.Header.Get("Sec-WebSocket-Key")))
	if req.Header.Get("X-Test-Greet") != "" {
		// A greeting in the same write as the 101.
		var b bytes.Buffer
		wsWriteFrame(&b, wsText, []byte("hello"), false)
		head = append(head, b.Bytes()...)
	}
	c.Write(head)
	u.mu.Lock()
	u.conns[c] = true
	u.mu.Unlock()
	u.upgrades.Add(1)
	u.open.Add(1)
	defer func() {
		u.mu.Lock()
		delete(u.conns, c)
		u.mu.Unlock()
		u.open.Add(-1)
	}()
	for {
		op, p, err := wsReadFrame(br)
		if err != nil {
			return
		}
		switch {
		case op == wsClose:
			wsWriteFrame(c, wsClose, p, false)
			return
		case op == wsText && string(p) == "bye":
			wsWriteFrame(c, wsClose, []byte{3, 232}, false)
			return
		}
		if wsWriteFrame(c, op, p, false) != nil {
			return
		}
	}
}

// kill resets every upgraded connection, as a crashing app's kernel does.
func (u *wsUpstream) kill() {
	u.mu.Lock()
	defer u.mu.Unlock()
	for c := range u.conns {
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
	}
}

// waitOpen waits until the upstream holds n upgraded connections.
func (u *wsUpstream) waitOpen(tb testing.TB, n int64, limit time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(limit)
	for u.open.Load() != n {
		if time.Now().After(deadline) {
			tb.Fatalf("upstream holds %d upgraded connections, want %d", u.open.Load(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// wsConn is a client's WebSocket through gatehouse.
type wsConn struct {
	c  net.Conn
	br *bufio.Reader
}

// wsDial opens a WebSocket to path from src and returns it after the 101,
// or the refusal's status.
func wsDial(tb testing.TB, src, addr, path string) (*wsConn, int) {
	tb.Helper()
	return wsHandshake(tb, dialFrom(tb, src, addr), path)
}

// wsHandshake opens a WebSocket to path on c, plain or TLS, and returns it
// after the 101, or the refusal's status.
func wsHandshake(tb testing.TB, c net.Conn, path string) (*wsConn, int) {
	tb.Helper()
	tb.Cleanup(func() { c.Close() })
	var key [16]byte
	rand.Read(key[:])
	k := base64.StdEncoding.EncodeToString(key[:])
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", path, k)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
	if err != nil {
		tb.Fatalf("handshake: %v", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		io.Copy(io.Discard, resp.Body)
		return nil, resp.StatusCode
	}
	if got := resp.Header.Get("Sec-WebSocket-Accept"); got != wsAccept(k) {
		tb.Fatalf("Sec-WebSocket-Accept %q, want %q", got, wsAccept(k))
	}
	if !strings.EqualFold(resp.Header.Get("Upgrade"), "websocket") {
		tb.Fatalf("101 without Upgrade: websocket: %v", resp.Header)
	}
	c.SetDeadline(time.Time{})
	return &wsConn{c: c, br: br}, resp.StatusCode
}

func (w *wsConn) exchange(op byte, p []byte) error {
	w.c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := wsWriteFrame(w.c, op, p, true); err != nil {
		return err
	}
	gotOp, got, err := wsReadFrame(w.br)
	if err != nil {
		return err
	}
	if gotOp != op || !bytes.Equal(got, p) {
		return fmt.Errorf("echo of %d bytes (op %d) came back as %d bytes (op %d)", len(p), op, len(got), gotOp)
	}
	return nil
}

func wsConfig(up string, idle string) string {
	return `
workers {
  count       = 2
  concurrency = 4
}
log {
  access_log = false
}
upstream "ws" {
  addresses       = ["` + up + `"]
  max_connections = 200
}
route "/ws" {
  proxy {
    upstream     = "ws"
    upgrade      = ["websocket"]
    idle_timeout = "` + idle + `"
  }
}
route "/plain" {
  proxy {
    upstream = "ws"
  }
}
route "/ok" {
  respond {
    body = "ok\n"
  }
}
`
}

// wsServerName is the name the TLS listener's certificate is for.
const wsServerName = "ws.test"

// wsSite is gatehouse before a WebSocket upstream (wsConfig), its clients
// reaching it over plain TCP or over TLS.
type wsSite struct {
	*harness
	addr string // the listener the clients use
	// On a TLS site: the certificate's file and the pool that trusts it.
	ca    string
	roots *x509.CertPool
}

// wsModes are the subtests of every WebSocket test: plain and over TLS.
var wsModes = []struct {
	name string
	tls  bool
}{{"plain", false}, {"tls", true}}

// startWS runs wsConfig, with a TLS listener for the clients when tlsOn
// (the sandbox strict, seccomp killing: the defaults).
func startWS(t *testing.T, tlsOn bool, up, idle string) *wsSite {
	t.Helper()
	if !tlsOn {
		h := start(t, wsConfig(up, idle))
		return &wsSite{harness: h, addr: h.addr}
	}
	cert := writeCert(t, t.TempDir(), "ws", false, wsServerName)
	h := start(t, fmt.Sprintf(`
listener "https" {
  address = "127.0.0.1:0"
  tls {
    certificate "ws" {
      cert = %q
      key  = %q
    }
  }
}
`, cert.cert, cert.key)+wsConfig(up, idle))
	leaf, err := x509.ParseCertificate(cert.der)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	return &wsSite{harness: h, addr: h.sup.Addrs()[1].String(), ca: cert.cert, roots: roots}
}

// dial opens a WebSocket to path from src (conn).
func (s *wsSite) dial(tb testing.TB, src, path string) (*wsConn, *recordWatch, int) {
	tb.Helper()
	c, watch := s.conn(tb, src)
	ws, status := wsHandshake(tb, c, path)
	return ws, watch, status
}

// conn opens a connection from src: on a TLS site over TLS 1.2, whose
// alert records keep their type in clear, so that the test sees
// close_notify (watch, nil on a plain site).
func (s *wsSite) conn(tb testing.TB, src string) (net.Conn, *recordWatch) {
	tb.Helper()
	raw := dialFrom(tb, src, s.addr)
	if s.roots == nil {
		return raw, nil
	}
	watch := &recordWatch{Conn: raw}
	tc := tls.Client(watch, &tls.Config{ServerName: wsServerName, RootCAs: s.roots, MaxVersion: tls.VersionTLS12})
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err != nil {
		tb.Fatalf("TLS handshake: %v", err)
	}
	return tc, watch
}

// recordWatch is a TLS client's socket that follows the server's records by
// their headers and keeps the type of the last one begun.
type recordWatch struct {
	net.Conn
	hdr  [5]byte
	hdrN int
	left int  // body bytes of the current record still to come
	last byte // the last record's type
}

// recordAlert is the TLS record type of an alert (close_notify is one).
const recordAlert = 21

func (r *recordWatch) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	for b := p[:n]; len(b) > 0; {
		if r.left > 0 {
			c := min(r.left, len(b))
			r.left -= c
			b = b[c:]
			continue
		}
		c := copy(r.hdr[r.hdrN:], b)
		b = b[c:]
		if r.hdrN += c; r.hdrN == len(r.hdr) {
			r.last, r.left, r.hdrN = r.hdr[0], int(binary.BigEndian.Uint16(r.hdr[3:])), 0
		}
	}
	return n, err
}

// expectEnd is expectClosed for a WebSocket, and on TLS also checks that
// the server's last record was an alert: the end came with close_notify.
func expectEnd(ws *wsConn, watch *recordWatch, limit time.Duration) error {
	if err := expectClosed(ws.c, limit); err != nil {
		return err
	}
	if watch != nil && watch.last != recordAlert {
		return fmt.Errorf("closed without close_notify: the last record was of type %d", watch.last)
	}
	return nil
}

// TestWebSocketEcho, plain and over TLS: 1000 messages of mixed sizes both
// ways through the relay; closing from either side closes the other (over
// TLS with close_notify), and a half-close leaves the other direction open;
// bytes sent before the 101 and with it are relayed; a message's short
// last record is not held back; a real client (python3's
// websockets) echoes small and 100 KB messages and sees both closes
// complete; an Upgrade to a route that does not allow it reaches the
// upstream as an ordinary request.
func TestWebSocketEcho(t *testing.T) {
	for _, m := range wsModes {
		t.Run(m.name, func(t *testing.T) { testWebSocketEcho(t, m.tls) })
	}
}

func testWebSocketEcho(t *testing.T, tlsOn bool) {
	up := startWSUpstream(t)
	h := startWS(t, tlsOn, up.addr, "60s")

	ws, watch, status := h.dial(t, "127.0.0.2", "/ws")
	if ws == nil {
		t.Fatalf("handshake answered %d, want 101", status)
	}
	sizes := []int{0, 1, 125, 126, 127, 1000, 65535, 65536, 70000, 16 << 10, 3}
	total := 0
	for i := 0; i < 1000; i++ {
		n := sizes[i%len(sizes)]
		p := make([]byte, n)
		rand.Read(p)
		op := byte(wsBinary)
		if i%2 == 0 {
			op = wsText
			p = bytes.Repeat([]byte("x"), n)
		}
		if err := ws.exchange(op, p); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		total += n
	}
	t.Logf("1000 messages, %d bytes each way", total)
	s := h.snapshot()
	if s.Upgrades != 1 || s.AtWorkers != 0 {
		t.Errorf("with one WebSocket open: upgrades %d, at workers %d; want 1 and 0 (outside the pool)", s.Upgrades, s.AtWorkers)
	}

	// The client closes: the upstream's side closes too, and its end
	// reaches the client.
	ws.c.SetDeadline(time.Now().Add(10 * time.Second))
	wsWriteFrame(ws.c, wsClose, []byte{3, 232}, true)
	if op, _, err := wsReadFrame(ws.br); err != nil || op != wsClose {
		t.Fatalf("close frame echoed as op %d, %v", op, err)
	}
	if err := expectEnd(ws, watch, 10*time.Second); err != nil {
		t.Fatalf("client side after its close: %v", err)
	}
	ws.c.Close()
	up.waitOpen(t, 0, 10*time.Second)

	// The upstream closes: the client's side closes too.
	ws, watch, _ = h.dial(t, "127.0.0.2", "/ws")
	if ws == nil {
		t.Fatal("second handshake refused")
	}
	if err := ws.exchange(wsText, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	ws.c.SetDeadline(time.Now().Add(10 * time.Second))
	wsWriteFrame(ws.c, wsText, []byte("bye"), true)
	if op, _, err := wsReadFrame(ws.br); err != nil || op != wsClose {
		t.Fatalf("upstream's close frame: op %d, %v", op, err)
	}
	if err := expectEnd(ws, watch, 10*time.Second); err != nil {
		t.Fatalf("client side after the upstream closed: %v", err)
	}
	ws.c.Close() // else the relay waits relayFinWait for the client's end
	h.waitFor("the upgraded connections released", 10*time.Second, func(s view.Snapshot) bool {
		return s.Upgrades == 0 && s.Counters["upgrades_started"] == 2
	})

	// The client half-closes (over TLS close_notify, then FIN) after a
	// 100 KB message: the upstream reads the end after the message, and
	// its echo still reaches the client, then the upstream's own end.
	ws, watch, _ = h.dial(t, "127.0.0.2", "/ws")
	if ws == nil {
		t.Fatal("third handshake refused")
	}
	big := make([]byte, 100<<10)
	rand.Read(big)
	ws.c.SetDeadline(time.Now().Add(10 * time.Second))
	wsWriteFrame(ws.c, wsBinary, big, true)
	if err := ws.c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if op, got, err := wsReadFrame(ws.br); err != nil || op != wsBinary || !bytes.Equal(got, big) {
		t.Fatalf("echo after the client's half-close: op %d, %d bytes, %v", op, len(got), err)
	}
	if err := expectEnd(ws, watch, 10*time.Second); err != nil {
		t.Fatalf("client side after its half-close: %v", err)
	}

	// A message sent right behind the request, before the 101 (over
	// TLS in records of its own, part of one perhaps read with the head),
	// and the upstream's greeting in its 101's write: neither is lost.
	c, _ := h.conn(t, "127.0.0.2")
	c.SetDeadline(time.Now().Add(10 * time.Second))
	var key [16]byte
	rand.Read(key[:])
	fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\nX-Test-Greet: 1\r\n\r\n",
		base64.StdEncoding.EncodeToString(key[:]))
	rand.Read(big)
	wsWriteFrame(c, wsBinary, big, true)
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, &http.Request{Method: "GET"}); err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("early message's handshake: %v, %v", resp, err)
	}
	if op, got, err := wsReadFrame(br); err != nil || op != wsText || string(got) != "hello" {
		t.Fatalf("greeting sent with the 101: op %d, %d bytes starting %q, %v", op, len(got), got[:min(len(got), 16)], err)
	}
	if op, got, err := wsReadFrame(br); err != nil || op != wsBinary || !bytes.Equal(got, big) {
		t.Fatalf("echo of the message sent before the 101: op %d, %d bytes, %v", op, len(got), err)
	}
	c.Close()

	// Messages whose last TLS record is short go out at once: with Nagle's
	// algorithm on the client's socket each waited for its delayed ACK
	// (40 ms: 4 s for 100), where they take a few milliseconds.
	ws, _, _ = h.dial(t, "127.0.0.2", "/ws")
	if ws == nil {
		t.Fatal("fourth handshake refused")
	}
	odd := bytes.Repeat([]byte("y"), 16<<10)
	begin := time.Now()
	for i := 0; i < 100; i++ {
		if err := ws.exchange(wsText, odd); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(begin); d > 2*time.Second {
		t.Errorf("100 messages of 16 KiB took %v: stalled on delayed ACKs?", d)
	}
	ws.c.Close()
	h.waitFor("the upgraded connections released", 10*time.Second, func(s view.Snapshot) bool {
		return s.Upgrades == 0 && s.Counters["upgrades_started"] == 5
	})

	t.Run("python", func(t *testing.T) {
		out := runWSClient(t, h, "/ws")
		// The echoes, then each close in milliseconds: an end not
		// passed on would be sent only by the relay's fin wait (5 s),
		// or the client's close_timeout (30 s).
		want := regexp.MustCompile(`(?s)^echoed 14\nclient close 1000 ([0-9.]+)\nupstream close 1000 ([0-9.]+)\n$`)
		m := want.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("python websockets client:\n%s", out)
		}
		for _, d := range m[1:] {
			if sec, _ := strconv.ParseFloat(d, 64); sec > 3 {
				t.Errorf("a close took %s s: an end was not passed on at once\n%s", d, out)
			}
		}
		t.Logf("python websockets: %q", out)
	})
	h.waitFor("the python client's connections released", 10*time.Second, func(s view.Snapshot) bool {
		return s.Upgrades == 0 && s.Counters["upgrades_started"] == 7
	})

	// Not allowed on /plain: Upgrade is hop-by-hop and dropped, so the
	// upstream answers the plain request (426), not a 502.
	if ws, _, status := h.dial(t, "127.0.0.2", "/plain"); ws != nil || status != http.StatusUpgradeRequired {
		t.Fatalf("upgrade on a route without upgrade: status %d, want 426 from the upstream", status)
	}
	if up.plain.Load() != 1 || up.upgrades.Load() != 7 {
		t.Errorf("upstream saw %d plain requests and %d upgrades, want 1 and 7", up.plain.Load(), up.upgrades.Load())
	}
}

// wsClientScript is a WebSocket client on python3's websockets (argv: the
// URL, and for wss the certificate to trust and the server name): it
// echoes binary and text messages of 0 bytes to 100 KB, closes, then
// opens another, sends "bye" and waits for the upstream's close. It prints
// the count echoed and each close's code and duration in seconds.
const wsClientScript = `
import asyncio, os, ssl, sys, time
import websockets

async def main(url, ca=None, name=None):
    kw = dict(max_size=None, compression=None, open_timeout=10, close_timeout=30)
    if ca:
        kw.update(ssl=ssl.create_default_context(cafile=ca), server_hostname=name)
    async with websockets.connect(url, **kw) as ws:
        n = 0
        for size in (0, 1, 125, 126, 65535, 65536, 100 * 1024):
            for msg in (os.urandom(size), "x" * size):
                await ws.send(msg)
                got = await asyncio.wait_for(ws.recv(), 10)
                if got != msg:
                    sys.exit("echo of %d bytes came back as %d" % (len(msg), len(got)))
                n += 1
        print("echoed", n)
        start = time.monotonic()
    print("client close", ws.close_code, "%.3f" % (time.monotonic() - start))
    async with websockets.connect(url, **kw) as ws:
        await ws.send("bye")
        start = time.monotonic()
        try:
            await asyncio.wait_for(ws.recv(), 10)
            sys.exit("a message after bye")
        except websockets.ConnectionClosedOK:
            pass
        await asyncio.wait_for(ws.wait_closed(), 40)
    print("upstream close", ws.close_code, "%.3f" % (time.monotonic() - start))

asyncio.run(main(*sys.argv[1:]))
`

// runWSClient runs wsClientScript against path on s (wss on a TLS site,
// trusting its certificate) and returns its output, or skips the test when
// no python3 has the websockets module (Debian's python3-websockets).
func runWSClient(t *testing.T, s *wsSite, path string) string {
	t.Helper()
	var py string
	for _, name := range []string{"python3", "/usr/bin/python3"} {
		if p, err := exec.LookPath(name); err == nil && exec.Command(p, "-c", "import websockets").Run() == nil {
			py = p
			break
		}
	}
	if py == "" {
		t.Skip("no python3 with the websockets module")
	}
	args := []string{"-c", wsClientScript, "ws://" + s.addr + path}
	if s.roots != nil {
		args = append(args[:2], "wss://"+s.addr+path, s.ca, wsServerName)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, py, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("python websockets client: %v\n%s", err, out)
	}
	return string(out)
}

// TestWebSocketIdleAndUpstreamDeath, plain and over TLS: an idle upgraded
// connection is closed at its idle timeout, both sides; an upstream that
// dies closes the client side (over TLS with close_notify).
func TestWebSocketIdleAndUpstreamDeath(t *testing.T) {
	for _, m := range wsModes {
		t.Run(m.name, func(t *testing.T) { testWebSocketIdleAndUpstreamDeath(t, m.tls) })
	}
}

func testWebSocketIdleAndUpstreamDeath(t *testing.T, tlsOn bool) {
	up := startWSUpstream(t)
	h := startWS(t, tlsOn, up.addr, "1s")

	idle, idleWatch, _ := h.dial(t, "127.0.0.2", "/ws")
	if idle == nil {
		t.Fatal("handshake refused")
	}
	if err := idle.exchange(wsText, []byte("once")); err != nil {
		t.Fatal(err)
	}
	// A connection that keeps talking outlives the idle one: activity in
	// either direction resets the timeout.
	busy, busyWatch, _ := h.dial(t, "127.0.0.3", "/ws")
	if busy == nil {
		t.Fatal("handshake refused")
	}
	closed := make(chan error, 1)
	go func() { closed <- expectEnd(idle, idleWatch, 20*time.Second) }()
	var rounds int
	for done := false; !done && rounds < 400; rounds++ {
		if err := busy.exchange(wsBinary, []byte("tick")); err != nil {
			t.Fatalf("busy connection after %d rounds: %v", rounds, err)
		}
		select {
		case err := <-closed:
			if err != nil {
				t.Fatalf("idle connection: %v", err)
			}
			done = true
		case <-time.After(50 * time.Millisecond):
		}
	}
	if rounds >= 400 {
		t.Fatal("idle connection not closed while the busy one talked")
	}
	up.waitOpen(t, 1, 10*time.Second) // the idle one's upstream side is gone too

	// The app dies: its connection is reset, and the client's closes.
	up.kill()
	if err := expectEnd(busy, busyWatch, 10*time.Second); err != nil {
		t.Fatalf("client side after the upstream died: %v", err)
	}
	h.waitFor("the upgraded connections released", 10*time.Second, func(s view.Snapshot) bool {
		return s.Upgrades == 0 && s.AtWorkers == 0
	})
}
