package e2e

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Compression in workers (issue 30 item 1), end to end under the strict
// sandbox: static files, a proxied JSON body and proxied streams (SSE on a
// stream-class route, chunked on a request-class one) compressed with each
// coding and decoded with the reference decoders (compress/gzip; Python's
// brotli and zstandard modules), byte for byte; each stream's event
// decoded before the upstream sends the next.

// refPython is the interpreter with Debian's python3-brotli and
// python3-zstandard.
const refPython = "/usr/bin/python3"

// needDecoders skips the test when the reference decoders are missing.
func needDecoders(t *testing.T) {
	t.Helper()
	if err := exec.Command(refPython, "-c", "import brotli, zstandard").Run(); err != nil {
		t.Skipf("%s with the brotli and zstandard modules is needed: %v", refPython, err)
	}
}

// streamDecoder is a Python program that decodes its standard input as it
// arrives (argv[1] is "br" or "zstd") and writes each piece out at once.
const streamDecoder = `
import os, sys, brotli, zstandard
if sys.argv[1] == "br":
    step = brotli.Decompressor().process
else:
    step = zstandard.ZstdDecompressor().decompressobj().decompress
while True:
    b = os.read(0, 65536)
    if not b:
        break
    out = step(b)
    if out:
        os.write(1, out)
`

// decodeRef decodes a whole body with the reference decoder for coding.
func decodeRef(t *testing.T, coding string, body []byte) []byte {
	t.Helper()
	switch coding {
	case "":
		return body
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatalf("gzip: %v", err)
		}
		out, err := io.ReadAll(zr)
		if err != nil {
			t.Fatalf("gzip: %v", err)
		}
		return out
	}
	cmd := exec.Command(refPython, "-c", streamDecoder, coding)
	cmd.Stdin = bytes.NewReader(body)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python %s decoder: %v\n%s", coding, err, stderr.String())
	}
	return out
}

// streamDecode returns a reader of body decoded as it arrives.
func streamDecode(t *testing.T, coding string, body io.Reader) io.Reader {
	t.Helper()
	if coding == "gzip" {
		zr, err := gzip.NewReader(body)
		if err != nil {
			t.Fatalf("gzip: %v", err)
		}
		return zr
	}
	cmd := exec.Command(refPython, "-c", streamDecoder, coding)
	cmd.Stdin = body
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return out
}

// webText is n bytes of text like a page's, from a fixed vocabulary: it
// compresses about as well as real text, not as well as a repeated line.
func webText(n int, seed int64) []byte {
	words := strings.Fields(`the of and to in is that for it as with was on be by this are or from at
		which an but not have has were all their they one can more will been would there about
		<div class="content"> </div> <p> </p> <a href="/docs/"> </a> function return var const
		gatehouse worker supervisor request response header body stream compress encoding`)
	r := rand.New(rand.NewSource(seed))
	var b bytes.Buffer
	for b.Len() < n {
		b.WriteString(words[r.Intn(len(words))])
		if r.Intn(12) == 0 {
			b.WriteByte('\n')
		} else {
			b.WriteByte(' ')
		}
	}
	return b.Bytes()[:n]
}

// compressUpstream is the proxied application: /api/data.json, a JSON
// body with its length; /api/chunked and /events, streams whose part i is
// sent and flushed, and the next only once the test has decoded it (gate).
type compressUpstream struct {
	json  []byte
	mu    sync.Mutex
	gates map[string]chan struct{} // by the request's id
	ended map[string]*atomic.Bool  // set when a stream's handler returned
}

// streamParts is how many parts a stream sends.
const streamParts = 5

func (u *compressUpstream) gate(id string) (chan struct{}, *atomic.Bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.gates[id] == nil {
		u.gates[id], u.ended[id] = make(chan struct{}), new(atomic.Bool)
	}
	return u.gates[id], u.ended[id]
}

func (u *compressUpstream) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/api/data.json":
		rw.Header().Set("Content-Type", "application/json")
		rw.Header().Set("Content-Length", strconv.Itoa(len(u.json)))
		rw.Write(u.json)
		return
	case "/events":
		rw.Header().Set("Content-Type", "text/event-stream")
		rw.Header().Set("Cache-Control", "no-cache")
	case "/api/chunked":
		rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
	default:
		http.NotFound(rw, r)
		return
	}
	gate, ended := u.gate(r.URL.Query().Get("id"))
	defer ended.Store(true)
	rc := http.NewResponseController(rw)
	for i := range streamParts {
		if _, err := rw.Write(streamPart(i)); err != nil || rc.Flush() != nil {
			return
		}
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		case <-time.After(10 * time.Second):
			return // the test never saw part i: it fails on ended
		}
	}
}

// streamPart is a stream's part i: an SSE event, with some text so that a
// part is not all framing.
func streamPart(i int) []byte {
	return []byte(fmt.Sprintf("id: %d\ndata: %s\n\n", i, bytes.ReplaceAll(webText(200, int64(i)), []byte("\n"), []byte(" "))))
}

func startCompressUpstream(t *testing.T) (*compressUpstream, string) {
	t.Helper()
	items := make([]map[string]any, 2000)
	for i := range items {
		items[i] = map[string]any{"id": i, "name": fmt.Sprintf("item %d", i), "tags": []string{"a", "b"}, "text": string(webText(40, int64(i)))}
	}
	body, err := json.Marshal(items)
	if err != nil {
		t.Fatal(err)
	}
	u := &compressUpstream{json: body, gates: map[string]chan struct{}{}, ended: map[string]*atomic.Bool{}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: u}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return u, l.Addr().String()
}

// compressTree writes the static files: text of 8 KB to 1 MB, a small one,
// an image, and a file with a precompressed sibling. It returns name→body.
func compressTree(t *testing.T, www string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{
		"small.txt":  webText(500, 1),
		"page.html":  webText(8<<10, 2),
		"site.css":   webText(64<<10, 3),
		"app.js":     webText(200<<10, 4),
		"big.txt":    webText(1<<20, 5),
		"photo.png":  webText(16<<10, 6), // the type, not the bytes, decides
		"pre.txt":    webText(16<<10, 7),
		"pre.txt.gz": []byte("the operator's own gzip"),
		"data.json":  webText(32<<10, 8),
	}
	m := map[string]string{}
	for k, v := range files {
		m[k] = string(v)
	}
	writeTree(t, www, m)
	return files
}

func compressConfig(www, upstream string) string {
	return fmt.Sprintf(`
workers {
  count       = 2
  concurrency = 4
}
log {
  access_log = false
}
upstream "app" {
  addresses = [%q]
}
route "/static/" {
  static {
    root = %q
  }
  compress {}
}
route "/plain/" {
  static {
    root = %q
  }
}
route "/api/" {
  proxy {
    upstream = "app"
  }
  compress {
    encodings = ["zstd", "br", "gzip"]
    types     = ["application/json", "text/*"]
  }
}
route "/events" {
  class = "stream"
  proxy {
    upstream = "app"
  }
  compress {}
}
`, upstream, www, www)
}

// checkSandboxed fails the test unless every worker reports every sandbox
// layer applied: compression runs under the strict allow-list.
func checkSandboxed(t *testing.T, h *harness) {
	t.Helper()
	s := h.snapshot()
	if len(s.Workers) == 0 {
		t.Fatal("no workers in the snapshot")
	}
	for _, w := range s.Workers {
		for _, l := range w.Sandbox {
			if strings.HasPrefix(l, "-") {
				t.Errorf("worker %d: layer not applied: %s", w.PID, l)
			}
		}
	}
}

func TestCompressEndToEnd(t *testing.T) {
	needDecoders(t)
	dir := workerReadableTempDir(t)
	www := filepath.Join(dir, "www")
	files := compressTree(t, www)
	up, upAddr := startCompressUpstream(t)
	h := start(t, compressConfig(www, upAddr))
	checkSandboxed(t, h)
	cl := &rawClient{tb: t, src: "127.0.0.1", dst: h.addr}
	defer cl.close()

	for _, coding := range []string{"gzip", "zstd", "br"} {
		for _, name := range []string{"page.html", "site.css", "app.js", "big.txt", "data.json"} {
			target := "/static/" + name
			res, body := mustDo(t, cl, exchange{method: "GET", target: target, hdr: []string{"Accept-Encoding", coding}})
			checkCompressed(t, "GET "+target, res, body, coding, files[name])
			if et := res.Header.Get("Etag"); !strings.HasPrefix(et, `W/"`) {
				t.Errorf("GET %s %s: ETag %q is not weak", target, coding, et)
			}
		}
		res, body := mustDo(t, cl, exchange{method: "GET", target: "/api/data.json", hdr: []string{"Accept-Encoding", coding}})
		checkCompressed(t, "GET /api/data.json", res, body, coding, up.json)
	}

	// What is never compressed, and what goes out as it is.
	for _, tc := range []struct {
		target string
		hdr    []string
		status int
		coding string // the Content-Encoding wanted
		vary   bool   // Vary: Accept-Encoding wanted
		body   []byte
	}{
		{"/static/small.txt", []string{"Accept-Encoding", "gzip"}, 200, "", false, files["small.txt"]},
		{"/static/photo.png", []string{"Accept-Encoding", "gzip"}, 200, "", false, files["photo.png"]},
		{"/static/big.txt", nil, 200, "", true, files["big.txt"]},
		{"/static/big.txt", []string{"Accept-Encoding", "gzip;q=0, identity"}, 200, "", true, files["big.txt"]},
		{"/static/big.txt", []string{"Accept-Encoding", "gzip", "Range", "bytes=100-199"}, 206, "", false, files["big.txt"][100:200]},
		{"/static/big.txt", []string{"Accept-Encoding", "gzip", "Cache-Control", "no-transform"}, 200, "", false, files["big.txt"]},
		{"/static/pre.txt", []string{"Accept-Encoding", "gzip, zstd"}, 200, "gzip", true, files["pre.txt.gz"]},
		{"/plain/big.txt", []string{"Accept-Encoding", "gzip"}, 200, "", false, files["big.txt"]},
	} {
		name := fmt.Sprintf("GET %s %q", tc.target, tc.hdr)
		res, body := mustDo(t, cl, exchange{method: "GET", target: tc.target, hdr: tc.hdr})
		if res.StatusCode != tc.status || res.Header.Get("Content-Encoding") != tc.coding {
			t.Errorf("%s: %d %q, want %d %q", name, res.StatusCode, res.Header.Get("Content-Encoding"), tc.status, tc.coding)
			continue
		}
		if got := varies(res); got != tc.vary {
			t.Errorf("%s: Vary %q, want Accept-Encoding %v", name, res.Header.Values("Vary"), tc.vary)
		}
		if !bytes.Equal(body, tc.body) {
			t.Errorf("%s: body of %d bytes differs from the %d expected", name, len(body), len(tc.body))
		}
	}

	// HEAD: the header a GET gets, no body.
	res, body := mustDo(t, cl, exchange{method: "HEAD", target: "/static/big.txt", hdr: []string{"Accept-Encoding", "br"}})
	if res.Header.Get("Content-Encoding") != "br" || !varies(res) || len(body) != 0 || res.Header.Get("Content-Length") != "" ||
		!strings.HasPrefix(res.Header.Get("Etag"), `W/"`) {
		t.Errorf("HEAD compressed: %d %v, %d body bytes", res.StatusCode, res.Header, len(body))
	}
	// The weak ETag revalidates: 304 with that same ETag.
	etag := res.Header.Get("Etag")
	res, _ = mustDo(t, cl, exchange{method: "GET", target: "/static/big.txt", hdr: []string{"Accept-Encoding", "br", "If-None-Match", etag}})
	if res.StatusCode != 304 || res.Header.Get("Etag") != etag || res.Header.Get("Content-Encoding") != "" {
		t.Errorf("revalidation with %s: %d %v, want 304 with the same ETag", etag, res.StatusCode, res.Header)
	}

	for _, coding := range []string{"gzip", "zstd", "br"} {
		for _, target := range []string{"/events", "/api/chunked"} {
			t.Run(strings.TrimPrefix(target, "/")+"/"+coding, func(t *testing.T) {
				checkStream(t, h.addr, up, target, coding)
			})
		}
	}
	checkSandboxed(t, h)
}

func mustDo(t *testing.T, cl *rawClient, ex exchange) (*http.Response, []byte) {
	t.Helper()
	res, body, err := cl.do(ex)
	if err != nil {
		t.Fatalf("%s %s: %v", ex.method, ex.target, err)
	}
	return res, body
}

// varies reports whether res has Vary: Accept-Encoding.
func varies(res *http.Response) bool {
	for _, v := range res.Header.Values("Vary") {
		for _, tok := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "Accept-Encoding") {
				return true
			}
		}
	}
	return false
}

// checkCompressed checks a 200 compressed with coding, with Vary and
// without Content-Length unless the whole body fitted before the header
// left, that decodes to want.
func checkCompressed(t *testing.T, name string, res *http.Response, body []byte, coding string, want []byte) {
	t.Helper()
	if res.StatusCode != 200 || res.Header.Get("Content-Encoding") != coding || !varies(res) {
		t.Errorf("%s %s: %d Content-Encoding %q Vary %q", name, coding, res.StatusCode, res.Header.Get("Content-Encoding"), res.Header.Values("Vary"))
		return
	}
	if cl := res.Header.Get("Content-Length"); cl != "" && cl != strconv.Itoa(len(body)) {
		t.Errorf("%s %s: Content-Length %s for %d bytes", name, coding, cl, len(body))
	}
	got := decodeRef(t, coding, body)
	if !bytes.Equal(got, want) {
		t.Errorf("%s %s: decodes to %d bytes, not the %d sent", name, coding, len(got), len(want))
		return
	}
	t.Logf("%s %s: %d → %d bytes (%.1f %%)", name, coding, len(want), len(body), 100*float64(len(body))/float64(len(want)))
}

// checkStream reads target's stream compressed with coding, decoding as it
// arrives: each part must decode while the upstream still holds the stream
// open (it sends the next only once this one is seen), and the whole must
// be the parts byte for byte.
func checkStream(t *testing.T, addr string, up *compressUpstream, target, coding string) {
	id := coding + target
	gate, ended := up.gate(id)
	c := dialFrom(t, "127.0.0.1", addr)
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "GET %s?id=%s HTTP/1.1\r\nHost: test\r\nAccept-Encoding: %s\r\n\r\n", target, id, coding)
	res, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: "GET"})
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 200 || res.Header.Get("Content-Encoding") != coding || !varies(res) {
		t.Fatalf("%d, Content-Encoding %q, Vary %q", res.StatusCode, res.Header.Get("Content-Encoding"), res.Header.Values("Vary"))
	}
	dec := streamDecode(t, coding, res.Body)
	var all []byte
	for i := range streamParts {
		want := streamPart(i)
		got := make([]byte, len(want))
		if _, err := io.ReadFull(dec, got); err != nil {
			t.Fatalf("part %d: %v", i, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("part %d decodes to %q, want %q", i, got, want)
		}
		if ended.Load() {
			t.Fatalf("part %d decoded only after the upstream ended the stream: not flushed", i)
		}
		all = append(all, got...)
		select {
		case gate <- struct{}{}:
		case <-time.After(10 * time.Second):
			t.Fatalf("the upstream stopped waiting after part %d", i)
		}
	}
	rest, err := io.ReadAll(dec)
	if err != nil || len(rest) != 0 {
		t.Fatalf("after the parts: %d bytes, %v", len(rest), err)
	}
	if len(all) == 0 {
		t.Fatal("no parts")
	}
}
