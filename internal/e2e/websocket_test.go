package e2e

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor"
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
// "bye", and answers a request without Upgrade 426. It counts the upgraded
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
	fmt.Fprintf(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
		wsAccept(req.Header.Get("Sec-WebSocket-Key")))
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
	c  *net.TCPConn
	br *bufio.Reader
}

// wsDial opens a WebSocket to path from src and returns it after the 101,
// or the refusal's status.
func wsDial(tb testing.TB, src, addr, path string) (*wsConn, int) {
	tb.Helper()
	c := dialFrom(tb, src, addr)
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

// TestWebSocketEcho: 1000 messages of mixed sizes both ways through the relay;
// closing from either side closes the other; an Upgrade to a route that does
// not allow it reaches the upstream as an ordinary request.
func TestWebSocketEcho(t *testing.T) {
	up := startWSUpstream(t)
	h := start(t, wsConfig(up.addr, "60s"))

	ws, status := wsDial(t, "127.0.0.2", h.addr, "/ws")
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

	// The client closes: the upstream's side closes too.
	ws.c.SetDeadline(time.Now().Add(10 * time.Second))
	wsWriteFrame(ws.c, wsClose, []byte{3, 232}, true)
	if op, _, err := wsReadFrame(ws.br); err != nil || op != wsClose {
		t.Fatalf("close frame echoed as op %d, %v", op, err)
	}
	ws.c.Close()
	up.waitOpen(t, 0, 10*time.Second)

	// The upstream closes: the client's side closes too.
	ws, _ = wsDial(t, "127.0.0.2", h.addr, "/ws")
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
	if err := expectClosed(ws.c, 10*time.Second); err != nil {
		t.Fatalf("client side after the upstream closed: %v", err)
	}
	h.waitFor("the upgraded connections released", 10*time.Second, func(s supervisor.Snapshot) bool {
		return s.Upgrades == 0 && s.Counters["upgrades_started"] == 2
	})

	// Not allowed on /plain: Upgrade is hop-by-hop and dropped, so the
	// upstream answers the plain request (426), not a 502.
	if ws, status := wsDial(t, "127.0.0.2", h.addr, "/plain"); ws != nil || status != http.StatusUpgradeRequired {
		t.Fatalf("upgrade on a route without upgrade: status %d, want 426 from the upstream", status)
	}
	if up.plain.Load() != 1 || up.upgrades.Load() != 2 {
		t.Errorf("upstream saw %d plain requests and %d upgrades, want 1 and 2", up.plain.Load(), up.upgrades.Load())
	}
}

// TestWebSocketIdleAndUpstreamDeath: an idle upgraded connection is closed at
// its idle timeout, both sides; an upstream that dies closes the client side.
func TestWebSocketIdleAndUpstreamDeath(t *testing.T) {
	up := startWSUpstream(t)
	h := start(t, wsConfig(up.addr, "1s"))

	idle, _ := wsDial(t, "127.0.0.2", h.addr, "/ws")
	if idle == nil {
		t.Fatal("handshake refused")
	}
	if err := idle.exchange(wsText, []byte("once")); err != nil {
		t.Fatal(err)
	}
	// A connection that keeps talking outlives the idle one: activity in
	// either direction resets the timeout.
	busy, _ := wsDial(t, "127.0.0.3", h.addr, "/ws")
	if busy == nil {
		t.Fatal("handshake refused")
	}
	closed := make(chan error, 1)
	go func() { closed <- expectClosed(idle.c, 20*time.Second) }()
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
	if err := expectClosed(busy.c, 10*time.Second); err != nil {
		t.Fatalf("client side after the upstream died: %v", err)
	}
	h.waitFor("the upgraded connections released", 10*time.Second, func(s supervisor.Snapshot) bool {
		return s.Upgrades == 0 && s.AtWorkers == 0
	})
}
