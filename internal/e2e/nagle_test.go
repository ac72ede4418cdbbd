package e2e

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Responses against Nagle's algorithm and the client's delayed ACK (issue
// 26): a response written in more than one segment must not wait for the
// client's ACK of the first (40 ms on Linux) before the rest leaves, and a
// small response leaves in one segment (docs/DESIGN.md §3.5). The client is
// a plain Go net.Conn, which leaves delayed ACKs on; every measured response
// is one after the first on a kept-alive connection, when Linux has left its
// quick-ACK mode.

// nagleSizes are the body sizes timed on every path: 16 KiB is copied
// through the write buffer, 64 KiB and 1 MiB go out with sendfile(2) from
// the static handler on a plain connection.
var nagleSizes = []int{16 << 10, 64 << 10, 1 << 20}

// bytesHandler answers /bytes/<n> with n bytes (at most 1 MiB) and their
// Content-Length, in one Write, as the respond handler does with its body
// (whose configured size the Hello frame bounds).
func bytesHandler(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/bytes/"))
	if err != nil || n < 0 || n > 1<<20 {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(n))
	w.Write(bytes.Repeat([]byte("b"), n))
}

// nagleSite serves, with the strict sandbox and seccomp_action = "kill":
// static files f<size> and small.txt (13 bytes), mid.bin (16 KiB) and
// sf.bin (40 KiB, sent with sendfile); a respond body of 13 bytes at /r13
// and of 16 KiB at /r16384; the embedded bytesHandler at /bytes/<size>;
// and a proxy at /up/<size> to a Go net/http upstream answering size bytes.
type nagleSite struct {
	*harness
	tlsAddr string
	roots   *x509.CertPool
}

func startNagleSite(t *testing.T) *nagleSite {
	t.Helper()
	dir := workerReadableTempDir(t)
	www := filepath.Join(dir, "www")
	files := map[string]string{
		"small.txt": "hello, world\n",
		"mid.bin":   strings.Repeat("m", 16<<10),
		"sf.bin":    strings.Repeat("s", 40<<10),
	}
	for _, n := range nagleSizes {
		files["f"+strconv.Itoa(n)] = strings.Repeat("f", n)
	}
	writeTree(t, www, files)
	cert := writeCert(t, t.TempDir(), "default", false, "default.test")

	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/up/"))
		if err != nil || n < 0 || n > 1<<20 {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(n))
		w.Write(bytes.Repeat([]byte("u"), n))
	})}
	go srv.Serve(up)
	t.Cleanup(func() { srv.Close() })

	h := start(t, fmt.Sprintf(`
listener "https" {
  address = "127.0.0.1:0"
  tls {
    certificate "default" {
      cert = %q
      key  = %q
    }
  }
}
sandbox {
  mode           = "strict"
  seccomp_action = "kill"
}
workers {
  count = 2
}
log {
  access_log = false
}
upstream "up" {
  addresses = [%q]
}
route "/" {
  static {
    root = %q
  }
}
route "/up/" {
  proxy {
    upstream = "up"
  }
}
route "/bytes/" {
  embedded {
    name = "bytes"
  }
}
route "/r13" {
  respond {
    body = "hello, world\n"
  }
}
route "/r16384" {
  respond {
    body = %q
  }
}
`, cert.cert, cert.key, up.Addr().String(), www, strings.Repeat("r", 16<<10)))
	roots := x509.NewCertPool()
	c, err := x509.ParseCertificate(cert.der)
	if err != nil {
		t.Fatal(err)
	}
	roots.AddCert(c)
	return &nagleSite{harness: h, tlsAddr: h.sup.Addrs()[1].String(), roots: roots}
}

// arrivalConn is a client's TCP connection that records, for the response
// being read, when its first byte arrived, when its last did, and the
// longest a read waited once the first had: a Nagle stall is one such wait,
// for the client's delayed ACK, where a busy machine spreads its delays
// over the reads of a large body.
type arrivalConn struct {
	*net.TCPConn
	first, last time.Time
	longest     time.Duration
}

func (c *arrivalConn) Read(p []byte) (int, error) {
	start := time.Now()
	n, err := c.TCPConn.Read(p)
	if n > 0 {
		now := time.Now()
		if c.first.IsZero() {
			c.first = now
		} else {
			c.longest = max(c.longest, now.Sub(start))
		}
		c.last = now
	}
	return n, err
}

// dataSegments returns how many segments carrying data the socket has
// received (tcpi_data_segs_in: pure ACKs are not counted).
func (c *arrivalConn) dataSegments(tb testing.TB) uint32 {
	tb.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		tb.Fatal(err)
	}
	var info *unix.TCPInfo
	var gerr error
	if err := rc.Control(func(fd uintptr) { info, gerr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }); err != nil {
		tb.Fatal(err)
	}
	if gerr != nil {
		tb.Fatalf("TCP_INFO: %v", gerr)
	}
	return info.Data_segs_in
}

// nagleClient is one kept-alive connection, plain or TLS, that times each
// response from its first byte's arrival to its last's.
type nagleClient struct {
	tb  testing.TB
	raw *arrivalConn
	rw  io.ReadWriter // raw, or the TLS connection over it
	br  *bufio.Reader
}

func (s *nagleSite) dial(tb testing.TB, useTLS bool) *nagleClient {
	tb.Helper()
	addr := s.addr
	if useTLS {
		addr = s.tlsAddr
	}
	raw := &arrivalConn{TCPConn: dialFrom(tb, "127.0.0.1", addr)}
	tb.Cleanup(func() { raw.Close() })
	c := &nagleClient{tb: tb, raw: raw, rw: raw}
	if useTLS {
		tc := tls.Client(raw, &tls.Config{ServerName: "default.test", RootCAs: s.roots})
		raw.SetDeadline(time.Now().Add(10 * time.Second))
		if err := tc.Handshake(); err != nil {
			tb.Fatalf("TLS handshake: %v", err)
		}
		c.rw = tc
	}
	c.br = bufio.NewReader(c.rw)
	return c
}

// get sends a GET for path and reads its response, which must be a 200 of
// size bytes, and returns the time between its first and last byte and
// the longest a read waited in between.
func (c *nagleClient) get(path string, size int) (span, wait time.Duration) {
	c.tb.Helper()
	c.raw.SetDeadline(time.Now().Add(10 * time.Second))
	c.raw.first, c.raw.last, c.raw.longest = time.Time{}, time.Time{}, 0
	if _, err := fmt.Fprintf(c.rw, "GET %s HTTP/1.1\r\nHost: test\r\n\r\n", path); err != nil {
		c.tb.Fatalf("GET %s: %v", path, err)
	}
	resp, body, err := readResponse(c.br, "GET")
	if err != nil {
		c.tb.Fatalf("GET %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK || len(body) != size || resp.Close {
		c.tb.Fatalf("GET %s: %s, %d bytes (want 200, %d bytes), close %v", path, resp.Status, len(body), size, resp.Close)
	}
	if c.br.Buffered() > 0 {
		c.tb.Fatalf("GET %s: %d bytes after the response", path, c.br.Buffered())
	}
	return c.raw.last.Sub(c.raw.first), c.raw.longest
}

// nagleSamples is how many kept-alive responses are timed per case, and
// nagleBound what the median of their longest waits must stay under. A
// stall is one wait for the client's delayed ACK, at least 40 ms on Linux,
// so a path that stalls has a median over 36 ms however fast the machine
// (a timer may end up to a 4 ms tick early). Without a stall, reads wait
// microseconds, also on a loaded machine, where the time from first byte to
// last of a 1 MiB body reached 25 ms (median) while the longest wait stayed
// under 0.1 ms; a hiccup delays a few responses, not most of them.
const (
	nagleSamples = 9
	nagleBound   = 20 * time.Millisecond
)

// Every response path, at 16 KiB, 64 KiB and 1 MiB (a respond body at
// 16 KiB: the configuration travels in one frame), on the second and later
// responses of a kept-alive connection: the median over nine responses of
// the longest wait for more of a response once its first byte arrived
// stays under nagleBound. Before TCP_NODELAY, eleven of the seventeen
// cases had medians of 41-47 ms (16 KiB on every path, 64 KiB proxied,
// from a handler and over TLS). The worker's and the supervisor's canned
// errors are a few hundred bytes written at once, and are counted in
// TestResponseSegments instead.
func TestResponsesWithoutNagleStall(t *testing.T) {
	s := startNagleSite(t)
	type path struct {
		name   string
		tls    bool
		prefix string
		sizes  []int
	}
	paths := []path{
		{"static", false, "/f", nagleSizes}, // 16 KiB copied, the others with sendfile
		{"respond", false, "/r", nagleSizes[:1]},
		{"handler", false, "/bytes/", nagleSizes},
		{"proxy", false, "/up/", nagleSizes},
		{"static TLS", true, "/f", nagleSizes},
		{"respond TLS", true, "/r", nagleSizes[:1]},
		{"handler TLS", true, "/bytes/", nagleSizes},
	}
	var failed []string
	for _, p := range paths {
		for _, n := range p.sizes {
			c := s.dial(t, p.tls)
			target := p.prefix + strconv.Itoa(n)
			c.get(target, n) // the first response, in quick-ACK mode
			spans := make([]time.Duration, nagleSamples)
			waits := make([]time.Duration, nagleSamples)
			for i := range spans {
				spans[i], waits[i] = c.get(target, n)
			}
			slices.Sort(spans)
			slices.Sort(waits)
			r := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
			t.Logf("%-11s %7d bytes: first to last byte median %v (%v .. %v); longest wait median %v (%v .. %v)", p.name, n,
				r(spans[len(spans)/2]), r(spans[0]), r(spans[len(spans)-1]), r(waits[len(waits)/2]), r(waits[0]), r(waits[len(waits)-1]))
			if median := waits[len(waits)/2]; median >= nagleBound {
				failed = append(failed, fmt.Sprintf("%s %d bytes: longest wait median %v", p.name, n, median))
			}
		}
	}
	if len(failed) > 0 {
		t.Errorf("responses stalled (median longest wait at least %v):\n%s", nagleBound, strings.Join(failed, "\n"))
	}
}

// A response under the loopback's 64 KiB segment leaves in one segment,
// header and body together: 13-byte respond, static, proxied and TLS
// bodies; 16 KiB copied from a file or a respond body; 40 KiB from a
// handler, and from a file with sendfile; the worker's canned 400 and the
// supervisor's canned 400 for plain HTTP on a TLS listener. Counted with
// the client's own tcpi_data_segs_in around the second response of a
// connection. Before the worker's segment shaping the 16 KiB and 40 KiB
// ones came in two segments.
func TestResponseSegments(t *testing.T) {
	s := startNagleSite(t)
	cases := []struct {
		name string
		tls  bool
		path string
		size int
	}{
		{"respond 13 bytes", false, "/r13", 13},
		{"static 13 bytes", false, "/small.txt", 13},
		{"proxy 13 bytes", false, "/up/13", 13},
		{"respond 13 bytes, TLS", true, "/r13", 13},
		{"static 16 KiB, copied", false, "/mid.bin", 16 << 10},
		{"respond 16 KiB", false, "/r16384", 16 << 10},
		{"handler 40 KiB", false, "/bytes/40960", 40 << 10},
		{"static 40 KiB, sendfile", false, "/sf.bin", 40 << 10},
	}
	for _, tc := range cases {
		c := s.dial(t, tc.tls)
		c.get(tc.path, tc.size)
		before := c.raw.dataSegments(t)
		c.get(tc.path, tc.size)
		if got := c.raw.dataSegments(t) - before; got != 1 {
			t.Errorf("%s: the response came in %d segments, want 1", tc.name, got)
		}
	}

	// Canned errors close the connection: counted from the first segment
	// of the connection to its end (the FIN carries no data).
	canned := func(name, addr, request, status string) {
		raw := &arrivalConn{TCPConn: dialFrom(t, "127.0.0.1", addr)}
		defer raw.Close()
		raw.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(raw, request); err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(raw)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !strings.HasPrefix(string(b), "HTTP/1.1 "+status) {
			t.Fatalf("%s: got %q, want %s", name, b, status)
		}
		if got := raw.dataSegments(t); got != 1 {
			t.Errorf("%s: %d bytes in %d segments, want 1", name, len(b), got)
		}
	}
	canned("worker's canned 400", s.addr, "GET / HTTP/1.1\r\nHost: test\r\nBad Header: x\r\n\r\n", "400")
	canned("supervisor's canned 400", s.tlsAddr, "GET / HTTP/1.1\r\nHost: test\r\n\r\n", "400")
}
