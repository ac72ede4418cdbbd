package e2e

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A TLS connection is kept alive after a stream-class response as a plain
// one is (docs/DESIGN.md §10): the round leaves the pool, but the
// connection's TLS state stays at its worker, and the requests pipelined
// behind the stream's are answered on the same connection.

// startTLSStream starts the TLS site with a stream-class route, /stream/,
// proxied to an upstream that answers "ok\n".
func startTLSStream(t *testing.T) *tlsSite {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		io.WriteString(rw, "ok\n")
	})}
	go up.Serve(l)
	t.Cleanup(func() { up.Close() })
	return startTLSWith(t, "", fmt.Sprintf(`
upstream "app" {
  addresses = [%q]
}
route "/stream/" {
  class = "stream"
  proxy {
    upstream = "app"
  }
}
`, l.Addr().String()))
}

const streamGet = "GET /stream/ok HTTP/1.1\r\nHost: rsa.test\r\n\r\n"

// readStreamOK reads one response to streamGet; keep says whether the
// connection must stay open after it.
func readStreamOK(t *testing.T, br *bufio.Reader, keep bool, what string) {
	t.Helper()
	resp, body, err := readResponse(br, "GET")
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if resp.StatusCode != 200 || body != "ok\n" || resp.Close == keep {
		t.Fatalf("%s: %d %q, Connection: close %v, want 200 \"ok\\n\", %v", what, resp.StatusCode, body, resp.Close, !keep)
	}
}

// Two stream-class requests pipelined in one write over one TLS connection
// are both answered and the connection stays open for a third; a request
// with Connection: close is answered and then the connection closes.
func TestTLSStreamKeepAlive(t *testing.T) {
	s := startTLSStream(t)
	c := tls.Client(dialFrom(t, "127.0.0.2", s.tlsAddr), &tls.Config{ServerName: "rsa.test", InsecureSkipVerify: true})
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	if _, err := io.WriteString(c, streamGet+streamGet); err != nil {
		t.Fatal(err)
	}
	readStreamOK(t, br, true, "pipelined request 1 of 2")
	readStreamOK(t, br, true, "pipelined request 2 of 2")
	io.WriteString(c, streamGet)
	readStreamOK(t, br, true, "a request after them")
	io.WriteString(c, strings.Replace(streamGet, "\r\n\r\n", "\r\nConnection: close\r\n\r\n", 1))
	readStreamOK(t, br, false, "a request with Connection: close")
	if err := expectEOFFrom(br); err != nil {
		t.Fatalf("after Connection: close: %v", err)
	}
}

// The end of a pipelined head decrypted already but still inside crypto/tls
// when a stream-class round ends (as in TestTLSPlaintextHeldInsideCryptoTLS:
// a full-size record read into a reader holding part of a head) is served,
// not left waiting for the socket, which has nothing more to give.
func TestTLSStreamPlaintextHeldInsideCryptoTLS(t *testing.T) {
	s := startTLSStream(t)
	raw := &holdConn{Conn: dialFrom(t, "127.0.0.2", s.tlsAddr)}
	c := tls.Client(raw, &tls.Config{ServerName: "rsa.test", InsecureSkipVerify: true,
		// full-size records from the first byte
		DynamicRecordSizingDisabled: true})
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	io.WriteString(c, streamGet)
	readStreamOK(t, br, true, "request 1")

	const later = 4
	writeSplitRecords(t, c, raw, "/stream/ok", later)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for i := 0; i < 1+later; i++ {
		readStreamOK(t, br, true, fmt.Sprintf("pipelined request %d of %d", i+1, 1+later))
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, streamGet)
	readStreamOK(t, br, true, "a request after them")
}
