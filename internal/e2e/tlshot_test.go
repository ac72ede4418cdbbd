package e2e

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/view"
)

// tlsHotClient is a TLS client from src whose requests are checked to be
// answered "ok".
type tlsHotClient struct {
	t   *testing.T
	raw *holdConn
	c   *tls.Conn
	br  *bufio.Reader
}

func newTLSHotClient(t *testing.T, src, addr string, maxVersion uint16) *tlsHotClient {
	t.Helper()
	raw := &holdConn{Conn: dialFrom(t, src, addr)}
	c := tls.Client(raw, &tls.Config{ServerName: "rsa.test", InsecureSkipVerify: true, MaxVersion: maxVersion})
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	return &tlsHotClient{t: t, raw: raw, c: c, br: bufio.NewReader(c)}
}

const hotGet = "GET /ok HTTP/1.1\r\nHost: rsa.test\r\n\r\n"

func (c *tlsHotClient) get(what string) {
	c.t.Helper()
	fmt.Fprint(c.c, hotGet)
	c.read(what)
}

func (c *tlsHotClient) read(what string) {
	c.t.Helper()
	resp, body, err := readResponse(c.br, "GET")
	if err != nil || resp.StatusCode != 200 || body != "ok\n" || resp.Close {
		c.t.Fatalf("%s: %v %v %q", what, resp, err, body)
	}
}

// holdConn collects what is written while holding, to send it later in
// pieces of the test's choosing.
type holdConn struct {
	net.Conn
	holding bool
	held    []byte
}

func (h *holdConn) Write(p []byte) (int, error) {
	if h.holding {
		h.held = append(h.held, p...)
		return len(p), nil
	}
	return h.Conn.Write(p)
}

// A worker keeps a TLS connection hot, on the TLS state it holds: the
// first request after the handshake and the ones after it are served in
// the handshake's dispatch; the client's close ends the hot wait. TLS 1.2:
// its client finishes the handshake after the server has, so the first
// request is sent after the handshake round has looked for one.
func TestTLSHotKeepAlive(t *testing.T) {
	s := startTLSWith(t, "  hot_window = \"10s\"\n", "")
	before := s.snapshot()
	c := newTLSHotClient(t, "127.0.0.2", s.tlsAddr, tls.VersionTLS12)
	if err := c.c.Handshake(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		c.get(fmt.Sprintf("request %d", i+1))
	}
	s.waitFor("the connection hot at its worker", 10*time.Second, func(snap view.Snapshot) bool {
		return snap.AtWorkers == 1
	})
	if d := counter(t, s.snapshot(), "dispatches") - counter(t, before, "dispatches"); d != 1 {
		t.Errorf("%d dispatches for a handshake and 3 requests, want 1", d)
	}
	// The close_notify ends the hot wait; the dispatch's Done counts.
	c.c.Close()
	after := s.waitFor("the closed connection gone", 10*time.Second, func(snap view.Snapshot) bool {
		return snap.AtWorkers == 0 && snap.Conns["idle"] == 0 && snap.Counters["requests"]-before.Counters["requests"] == 3
	})
	if d := counter(t, after, "dispatches") - counter(t, before, "dispatches"); d != 1 {
		t.Errorf("%d dispatches after the close, want 1", d)
	}
	// The first request may come before the handshake round looks for it
	// (then it is not a hot one), the others come in hot waits.
	if n := counter(t, after, "hot_requests") - counter(t, before, "hot_requests"); n < 2 || n > 3 {
		t.Errorf("hot_requests rose by %d, want 2 or 3", n)
	}
	if n := counter(t, after, "handback_hot_window") - counter(t, before, "handback_hot_window"); n != 0 {
		t.Errorf("%d hand-backs at the window's end, want none", n)
	}
}

// The moment another client waits for the only slot, a hot TLS connection
// goes back, its TLS state kept at the worker: its next request is
// dispatched to it by affinity.
func TestTLSHotHandedBackUnderPressure(t *testing.T) {
	s := startTLSWith(t, "  count       = 1\n  concurrency = 1\n  hot_window  = \"10s\"\n", "")
	before := s.snapshot()
	a := newTLSHotClient(t, "127.0.0.2", s.tlsAddr, 0)
	for i := 0; i < 3; i++ {
		a.get(fmt.Sprintf("client a, request %d", i+1))
	}
	s.waitFor("a's connection hot at the worker", 10*time.Second, func(snap view.Snapshot) bool {
		return snap.AtWorkers == 1
	})
	if d := counter(t, s.snapshot(), "dispatches") - counter(t, before, "dispatches"); d != 1 {
		t.Fatalf("%d dispatches for 3 requests on one hot TLS connection, want 1", d)
	}
	b := newTLSHotClient(t, "127.0.0.3", s.tlsAddr, 0)
	b.get("client b (a's hot connection was not handed back?)")
	snap := s.snapshot()
	if n := counter(t, snap, "handback_pressure") - counter(t, before, "handback_pressure"); n < 1 {
		t.Errorf("handback_pressure rose by %d, want at least 1", n)
	}
	if n := counter(t, snap, "pool_waits") - counter(t, before, "pool_waits"); n != 1 {
		t.Errorf("pool_waits rose by %d, want 1: b waited for a's slot", n)
	}
	// a's second and third, and each first request that came after its
	// handshake round looked for it (b's only if the notice that pressure
	// ended reached the worker by then).
	if n := counter(t, snap, "hot_requests") - counter(t, before, "hot_requests"); n < 2 || n > 4 {
		t.Errorf("hot_requests rose by %d, want 2 to 4", n)
	}
	b.c.Close()
	a.get("client a after the hand-back")
	after := s.snapshot()
	if n := counter(t, after, "tls_affinity") - counter(t, before, "tls_affinity"); n < 1 {
		t.Errorf("a's next request: %d dispatches by affinity, want at least 1", n)
	}
	if n := counter(t, after, "accepted") - counter(t, before, "accepted"); n != 2 {
		t.Errorf("%d connections accepted, want 2", n)
	}
}

// A TLS record that is only partly there when the hot window ends is not
// read: the connection goes back to the supervisor with the record whole in
// the socket, and its completion is dispatched and served.
func TestTLSHotRecordSplitAcrossWindow(t *testing.T) {
	s := startTLSWith(t, "  hot_window = \"100ms\"\n", "")
	before := s.snapshot()
	c := newTLSHotClient(t, "127.0.0.2", s.tlsAddr, 0)
	c.get("request 1")
	parked := s.waitFor("parked after request 1", 10*time.Second, func(snap view.Snapshot) bool {
		return snap.AtWorkers == 0 && snap.Conns["idle"] == 1
	})
	// Request 2's record and the first bytes of request 3's go in one
	// write: they are in the socket before request 2's round ends, so the
	// hot wait after it finds the partial record whatever the timing.
	c.raw.holding = true
	fmt.Fprint(c.c, hotGet)
	fmt.Fprint(c.c, hotGet)
	c.raw.holding = false
	held := c.raw.held
	if len(held) < 5 {
		t.Fatalf("%d bytes written for two requests", len(held))
	}
	first := 5 + int(binary.BigEndian.Uint16(held[3:5]))
	cut := first + 12 // the next record's header and a few body bytes
	if len(held) <= cut || len(held) != first+5+int(binary.BigEndian.Uint16(held[first+3:first+5])) {
		t.Fatalf("the two requests are not two records cut inside the second: %d bytes, first %d", len(held), first)
	}
	if _, err := c.raw.Conn.Write(held[:cut]); err != nil {
		t.Fatal(err)
	}
	c.read("request 2")
	s.waitFor("handed back at the window's end with a partial record", 10*time.Second, func(snap view.Snapshot) bool {
		return snap.AtWorkers == 0 && snap.Conns["idle"] == 1 &&
			snap.Counters["handback_hot_window"] > parked.Counters["handback_hot_window"]
	})
	mid := s.snapshot()
	if _, err := c.raw.Conn.Write(held[cut:]); err != nil {
		t.Fatal(err)
	}
	c.read("request 3, its record completed after the hand-back")
	c.get("request 4")
	after := s.snapshot()
	if n := counter(t, after, "tls_affinity") - counter(t, mid, "tls_affinity"); n < 1 {
		t.Errorf("request 3: %d dispatches by affinity, want at least 1", n)
	}
	if n := counter(t, after, "accepted") - counter(t, before, "accepted"); n != 1 {
		t.Errorf("%d connections accepted, want 1", n)
	}
}

// Hot TLS connections under pressure that comes and goes all the time:
// more clients than slots, each sending its requests one after another on
// one connection. A pressure notice may come while a worker decrypts a
// record it found complete; that must not stop crypto/tls between the
// record's header and its body (the socket would be left off the record
// boundary where the dispatcher peeks, or the read's error taken for the
// client's end). Every request is answered and no connection is closed.
func TestTLSHotPressureChurnClosesNothing(t *testing.T) {
	const clients, requests = 16, 250
	s := startTLSWith(t, "  count       = 2\n  concurrency = 4\n", "")
	before := s.snapshot()
	errs := make(chan error, clients)
	for i := 0; i < clients; i++ {
		go func(i int) {
			src := fmt.Sprintf("127.0.0.%d", 10+i)
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
			raw, err := d.Dial("tcp", s.tlsAddr)
			if err != nil {
				errs <- err
				return
			}
			c := tls.Client(raw, &tls.Config{ServerName: "rsa.test", InsecureSkipVerify: true})
			defer c.Close()
			c.SetDeadline(time.Now().Add(60 * time.Second))
			br := bufio.NewReader(c)
			for n := 0; n < requests; n++ {
				if _, err := fmt.Fprint(c, hotGet); err != nil {
					errs <- fmt.Errorf("%s request %d: %v", src, n+1, err)
					return
				}
				resp, body, err := readResponse(br, "GET")
				if err != nil || resp.StatusCode != 200 || body != "ok\n" {
					errs <- fmt.Errorf("%s request %d: %v %v %q", src, n+1, resp, err, body)
					return
				}
			}
			errs <- nil
		}(i)
	}
	for i := 0; i < clients; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	after := s.snapshot()
	if n := counter(t, after, "accepted") - counter(t, before, "accepted"); n != clients {
		t.Errorf("%d connections accepted, want %d", n, clients)
	}
	if n := counter(t, after, "hot_requests") - counter(t, before, "hot_requests"); n == 0 {
		t.Error("no request was served hot: the test does not test hot waits")
	}
	if n := counter(t, after, "handback_pressure") - counter(t, before, "handback_pressure"); n == 0 {
		t.Error("no hot connection went back under pressure: the test does not test pressure")
	}
	t.Logf("%d requests, %d hot, %d pressure hand-backs", clients*requests,
		counter(t, after, "hot_requests")-counter(t, before, "hot_requests"),
		counter(t, after, "handback_pressure")-counter(t, before, "handback_pressure"))
}

// crypto/tls returns at most what a read asks for and keeps the rest of a
// record's plaintext in the TLS state, out of the worker's reader. Here a
// partial head is held when a full-size record arrives, so the reader has
// room for all but the head's length of it: the end of the last request
// stays inside crypto/tls. Every request is answered; none waits for input
// that was already decrypted. With 12 requests in the record, more than a
// dispatch serves in a row, the rest goes back and comes again by affinity.
func TestTLSPlaintextHeldInsideCryptoTLS(t *testing.T) {
	for _, later := range []int{4, 12} {
		t.Run(fmt.Sprint(later), func(t *testing.T) { tlsPlaintextHeld(t, later) })
	}
}

func tlsPlaintextHeld(t *testing.T, later int) {
	s := startTLSWith(t, "", "")
	raw := &holdConn{Conn: dialFrom(t, "127.0.0.2", s.tlsAddr)}
	c := tls.Client(raw, &tls.Config{ServerName: "rsa.test", InsecureSkipVerify: true,
		// full-size records from the first byte
		DynamicRecordSizingDisabled: true})
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	hc := &tlsHotClient{t: t, raw: raw, c: c, br: bufio.NewReader(c)}
	hc.get("request 1")

	writeSplitRecords(t, c, raw, "/ok", later)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for i := 0; i < 1+later; i++ {
		hc.read(fmt.Sprintf("pipelined request %d of %d", i+1, 1+later))
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	hc.get("a request after them")
}

// writeSplitRecords sends, as exactly two TLS records written at once, a
// request for path whose head ends in the second record, followed there by
// later more requests filling it: the second record is complete in the
// socket when the first's partial head is read.
func writeSplitRecords(t *testing.T, c *tls.Conn, raw *holdConn, path string, later int) {
	t.Helper()
	const recordMax = 16 << 10
	partial := "GET " + path + " HTTP/1.1\r\nHost: rsa.test\r\n"
	next := "\r\n"
	for i := 0; i < later; i++ {
		req := "GET " + path + " HTTP/1.1\r\nHost: rsa.test\r\nX-Pad: "
		pad := (recordMax-2)/later - len(req) - 4
		if i == later-1 {
			pad = recordMax - len(next) - len(req) - 4
		}
		next += req + strings.Repeat("p", pad) + "\r\n\r\n"
	}
	if len(next) != recordMax {
		t.Fatalf("the second record's plaintext is %d bytes, want %d", len(next), recordMax)
	}
	raw.holding = true
	io.WriteString(c, partial)
	io.WriteString(c, next)
	raw.holding = false
	held := raw.held
	first := 5 + int(binary.BigEndian.Uint16(held[3:5]))
	if len(held) < first+5 || len(held) != first+5+int(binary.BigEndian.Uint16(held[first+3:first+5])) {
		t.Fatalf("the two writes are not two records: %d bytes, first %d", len(held), first)
	}
	if _, err := raw.Conn.Write(held); err != nil {
		t.Fatal(err)
	}
}
