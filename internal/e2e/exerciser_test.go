package e2e

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The handler-path exerciser (issue 10): every built-in handler is sent what
// real sites and clients send, under sandbox mode strict with seccomp kill
// and real worker processes, and no worker may die.

// echoHandler is a legitimate embedded handler: it reads the body and
// answers with its length and SHA-256, streaming ?chunks=N flushed parts
// first.
func echoHandler(w http.ResponseWriter, r *http.Request) {
	n, _ := strconv.Atoi(r.URL.Query().Get("chunks"))
	for i := range min(n, 100) {
		fmt.Fprintf(w, "part %d\n", i)
		w.(http.Flusher).Flush()
	}
	hash := sha256.New()
	size, err := io.Copy(hash, r.Body)
	if err != nil {
		return
	}
	fmt.Fprintf(w, "%s %d %x\n", r.Method, size, hash.Sum(nil))
}

// siteFiles is a document root as a real site has it: name -> content; a
// name ending in "/" is an empty directory.
func siteFiles() map[string]string {
	big := make([]byte, 6<<20)
	for i := range big {
		big[i] = byte(i*7 + i>>11)
	}
	return map[string]string{
		"index.html":                 "<h1>home</h1>\n",
		"css/site.css":               "body { margin: 0 }\n",
		"css/fonts/a.woff2":          "wOF2....",
		"js/app.js":                  "console.log('identity')\n",
		"js/app.js.gz":               "gzip bytes",
		"a/b/c/d/e/deep.txt":         "five levels down\n",
		"a/b/c/d/index.html":         "<p>d index</p>\n",
		"a/b/c/no-index.txt":         "x",
		"with space/file name.txt":   "spaces\n",
		"ünï/日本語 ファイル.txt":           "utf-8\n",
		"empty.txt":                  "",
		"no index/x.txt":             "x",
		"large.bin":                  string(big),
		"upload":                     "<html><script>alert(1)</script></html>",
		"range.txt":                  strings.Repeat("0123456789", 100),
		"emptydir/":                  "",
		"a/b/c/d/e/f/g/h/deepest.md": "# eight\n",
	}
}

// writeTree writes files under dir.
func writeTree(tb testing.TB, dir string, files map[string]string) {
	tb.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if strings.HasSuffix(name, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				tb.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
}

// exchange is one request and what its answer must be.
type exchange struct {
	method, target string
	hdr            []string // name, value, ...
	body           string
	chunked        bool // send body with Transfer-Encoding: chunked
	status         int
	check          func(*http.Response, []byte) error
	// cut: the response may end early or not come at all, with the
	// connection closed (an upstream reset mid-body).
	cut bool
}

// rawClient sends requests as written on one connection from src,
// reconnecting when the server closed it.
type rawClient struct {
	tb       testing.TB
	src, dst string
	host     string // the Host sent; "" is "test"
	sni      string // non-empty: over TLS, with this server name
	c        net.Conn
	br       *bufio.Reader
}

func (rc *rawClient) do(ex exchange) (*http.Response, []byte, error) {
	if rc.c == nil {
		rc.c = dialFrom(rc.tb, rc.src, rc.dst)
		if rc.sni != "" {
			rc.c = tls.Client(rc.c, &tls.Config{ServerName: rc.sni, InsecureSkipVerify: true})
		}
		rc.br = bufio.NewReader(rc.c)
	}
	rc.c.SetDeadline(time.Now().Add(20 * time.Second))
	host := rc.host
	if host == "" {
		host = "test"
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", ex.method, ex.target, host)
	for i := 0; i+1 < len(ex.hdr); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", ex.hdr[i], ex.hdr[i+1])
	}
	switch {
	case ex.chunked:
		b.WriteString("Transfer-Encoding: chunked\r\n\r\n")
		for rest := ex.body; rest != ""; {
			n := min(len(rest), 100000)
			fmt.Fprintf(&b, "%x\r\n%s\r\n", n, rest[:n])
			rest = rest[n:]
		}
		b.WriteString("0\r\n\r\n")
	case ex.body != "" || ex.method == "POST":
		fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(ex.body), ex.body)
	default:
		b.WriteString("\r\n")
	}
	if _, err := rc.c.Write(b.Bytes()); err != nil {
		rc.close()
		return nil, nil, err
	}
	resp, err := http.ReadResponse(rc.br, &http.Request{Method: ex.method})
	if err != nil {
		rc.close()
		return nil, nil, err
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.Close {
		rc.close()
	}
	return resp, body, err
}

func (rc *rawClient) close() {
	if rc.c != nil {
		rc.c.Close()
		rc.c = nil
	}
}

// run sends every exchange and checks its answer. It gives up after three
// answers that mean the workers are gone (none, or 503), so a sandbox that
// kills fails the test in seconds, not a no-worker timeout per request.
func (rc *rawClient) run(t *testing.T, exs []exchange) {
	t.Helper()
	gone := 0
	for _, ex := range exs {
		if gone == 3 {
			t.Fatalf("giving up: the workers stopped answering")
		}
		name := ex.method + " " + ex.target
		if len(ex.hdr) > 0 {
			name += " " + strings.Join(ex.hdr, ": ")
		}
		resp, body, err := rc.do(ex)
		if resp == nil && ex.cut {
			continue
		}
		if resp == nil || resp.StatusCode == http.StatusServiceUnavailable && ex.status != http.StatusServiceUnavailable {
			gone++
		}
		if resp == nil {
			t.Errorf("%s: no response: %v", name, err)
			continue
		}
		if err != nil && !ex.cut {
			t.Errorf("%s: reading the body: %v", name, err)
		}
		if resp.StatusCode != ex.status {
			t.Errorf("%s: status %d, want %d (body %.200q)", name, resp.StatusCode, ex.status, body)
			continue
		}
		if ex.check != nil {
			if err := ex.check(resp, body); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
	}
}

// checkNoDeaths fails the test if any worker died or was restarted, and
// shows what the kernel logged about seccomp kills.
func checkNoDeaths(t *testing.T, h *harness) {
	t.Helper()
	s := h.snapshot()
	restarts := 0
	for _, w := range s.Workers {
		restarts += w.Restarts
	}
	if d := s.Counters["worker_deaths"]; d != 0 || restarts != 0 {
		out, _ := exec.Command("sh", "-c", "dmesg 2>/dev/null | grep -i -e seccomp -e 'syscall=' | tail -5").CombinedOutput()
		t.Errorf("worker deaths %d, restarts %d; kernel log:\n%s", d, restarts, out)
	}
}

func wantBody(want string) func(*http.Response, []byte) error {
	return func(_ *http.Response, b []byte) error {
		if string(b) != want {
			return fmt.Errorf("body %.100q, want %.100q", b, want)
		}
		return nil
	}
}

func wantHeader(name, want string) func(*http.Response, []byte) error {
	return func(r *http.Response, _ []byte) error {
		if got := r.Header.Get(name); got != want {
			return fmt.Errorf("%s %q, want %q", name, got, want)
		}
		return nil
	}
}

func all(checks ...func(*http.Response, []byte) error) func(*http.Response, []byte) error {
	return func(r *http.Response, b []byte) error {
		for _, c := range checks {
			if err := c(r, b); err != nil {
				return err
			}
		}
		return nil
	}
}

// strictConfig is the exerciser's configuration: two workers under the
// strict sandbox with seccomp kill, and a route for every built-in handler.
func strictConfig(www, upstream string) string {
	return fmt.Sprintf(`
workers {
  count       = 2
  concurrency = 4
}
limits {
  max_body_bytes = 8388608
}
log {
  access_log = false
}
sandbox {
  mode           = "strict"
  seccomp_action = "kill"
}
route "/" {
  static {
    root = %[1]q
  }
}
route "/listing/" {
  static {
    root    = %[1]q
    listing = true
  }
}
route "/respond" {
  respond {
    status = 200
    body   = "fixed\n"
  }
}
upstream "up" {
  addresses        = [%[2]q]
  response_timeout = "2s"
}
route "/up/" {
  proxy {
    upstream = "up"
    upgrade  = ["websocket"]
  }
}
route "/metrics" {
  metrics {
    allow = ["127.0.0.1/32"]
  }
}
route "/echo" {
  embedded {
    name = "echo"
  }
}
`, www, upstream)
}

// startExerciseUpstream is the proxy's upstream: chunked and streamed
// answers, resets before and after the head, a slow and a too-slow answer,
// large bodies, an echo of the request body and an answer without a
// Content-Type.
func startExerciseUpstream(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	big := bytes.Repeat([]byte("upstream body "), 300000) // 4.2 MB
	reset := func(w http.ResponseWriter, afterHead bool) {
		c, bw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		if afterHead {
			bw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\npartial")
			bw.Flush()
		}
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch strings.TrimPrefix(r.URL.Path, "/up/") {
		case "chunked":
			for i := range 5 {
				fmt.Fprintf(w, "chunk %d\n", i)
				w.(http.Flusher).Flush()
			}
		case "stream":
			for i := range 5 {
				fmt.Fprintf(w, "event %d\n", i)
				w.(http.Flusher).Flush()
				time.Sleep(30 * time.Millisecond)
			}
		case "reset":
			reset(w, false)
		case "reset-mid-body":
			reset(w, true)
		case "slow":
			time.Sleep(300 * time.Millisecond)
			w.Write([]byte("late but in time\n"))
		case "too-slow":
			select {
			case <-time.After(6 * time.Second):
			case <-r.Context().Done():
			}
		case "big":
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write(big)
		case "echo":
			hash := sha256.New()
			n, _ := io.Copy(hash, r.Body)
			fmt.Fprintf(w, "%d %x\n", n, hash.Sum(nil))
		case "ws":
			// A WebSocket echo: the relay (splice) under the sandbox.
			c, bw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			fmt.Fprintf(bw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
				wsAccept(r.Header.Get("Sec-WebSocket-Key")))
			bw.Flush()
			for {
				op, p, err := wsReadFrame(bw)
				if err != nil || op == wsClose || wsWriteFrame(c, op, p, false) != nil {
					return
				}
			}
		case "untyped":
			w.Header()["Content-Type"] = nil // net/http would guess text/html
			w.Write([]byte("<html><script>alert(1)</script></html>"))
		default:
			http.NotFound(w, r)
		}
	})}
	go srv.Serve(l)
	tb.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}

func TestHandlerPathsStrictSandbox(t *testing.T) {
	dir := workerReadableTempDir(t)
	www := filepath.Join(dir, "www")
	files := siteFiles()
	writeTree(t, www, files)
	outside := filepath.Join(dir, "outside")
	writeTree(t, outside, map[string]string{"secret.txt": "SECRET"})
	for link, target := range map[string]string{
		"link-in":          "css/site.css",
		"a/b/dir-link":     "../../js",
		"link-out":         filepath.Join(outside, "secret.txt"),
		"link-out-rel":     "../outside/secret.txt",
		"a/dir-out":        outside,
		"a/b/c/loop":       "loop",
		"dangling":         "nowhere",
		"link-etc":         "/etc/passwd",
		"a/b/c/d/up-twice": "../../../../../outside/secret.txt",
	} {
		if err := os.Symlink(target, filepath.Join(www, filepath.FromSlash(link))); err != nil {
			t.Fatal(err)
		}
	}
	h := start(t, strictConfig(www, startExerciseUpstream(t)))
	rc := &rawClient{tb: t, src: "127.0.0.1", dst: h.addr}
	defer rc.close()

	large := files["large.bin"]
	rangeTxt := files["range.txt"]
	noSecret := func(_ *http.Response, b []byte) error {
		if bytes.Contains(b, []byte("SECRET")) || bytes.Contains(b, []byte("root:")) {
			return fmt.Errorf("served a file outside the root: %.80q", b)
		}
		return nil
	}
	var etag string
	lastModified := ""
	staticExchanges := []exchange{
		// Nested directories, several levels deep.
		{method: "GET", target: "/css/site.css", status: 200, check: all(wantBody(files["css/site.css"]), wantHeader("Content-Type", "text/css; charset=utf-8"))},
		{method: "GET", target: "/a/b/c/d/e/deep.txt", status: 200, check: wantBody(files["a/b/c/d/e/deep.txt"])},
		{method: "GET", target: "/a/b/c/d/e/f/g/h/deepest.md", status: 200, check: all(wantBody("# eight\n"), wantHeader("Content-Type", "text/markdown; charset=utf-8"))},
		{method: "GET", target: "/css/fonts/a.woff2", status: 200, check: wantHeader("Content-Type", "font/woff2")},
		// Spaces and UTF-8 names.
		{method: "GET", target: "/with%20space/file%20name.txt", status: 200, check: wantBody("spaces\n")},
		{method: "GET", target: "/%C3%BCn%C3%AF/%E6%97%A5%E6%9C%AC%E8%AA%9E%20%E3%83%95%E3%82%A1%E3%82%A4%E3%83%AB.txt", status: 200, check: wantBody("utf-8\n")},
		// Directories with and without index, with and without the slash.
		{method: "GET", target: "/", status: 200, check: wantBody(files["index.html"])},
		{method: "GET", target: "/a/b/c/d/", status: 200, check: wantBody(files["a/b/c/d/index.html"])},
		{method: "GET", target: "/a/b/c/d", status: 301, check: wantHeader("Location", "/a/b/c/d/")},
		{method: "GET", target: "/a/b/c", status: 301, check: wantHeader("Location", "/a/b/c/")},
		{method: "GET", target: "/with%20space?x=1", status: 301, check: wantHeader("Location", "/with%20space/?x=1")},
		{method: "GET", target: "/a/b/c/", status: 403},
		{method: "GET", target: "/no%20index/", status: 403},
		{method: "GET", target: "/emptydir/", status: 403},
		{method: "GET", target: "/listing/a/b/c/", status: 200, check: wantBody("<!doctype html>\n<meta name=\"viewport\" content=\"width=device-width\">\n<pre>\n<a href=\"d/\">d/</a>\n<a href=\"loop\">loop</a>\n<a href=\"no-index.txt\">no-index.txt</a>\n</pre>\n")},
		{method: "GET", target: "/listing/emptydir", status: 301, check: wantHeader("Location", "/listing/emptydir/")},
		// Missing files at every depth.
		{method: "GET", target: "/missing", status: 404},
		{method: "GET", target: "/a/missing", status: 404},
		{method: "GET", target: "/a/b/missing.css", status: 404},
		{method: "GET", target: "/a/b/c/missing/deeper/still", status: 404},
		{method: "GET", target: "/a/b/c/d/e/f/g/h/i/j/missing", status: 404},
		{method: "GET", target: "/nonexistent/deep/path", status: 404},
		{method: "GET", target: "/css/site.css/", status: 404},
		{method: "GET", target: "/css/site.css/x", status: 404},
		{method: "GET", target: "/" + strings.Repeat("n", 300), status: 404},
		// Traversal sent raw, and percent-encoded: ".." never climbs above
		// the root; encoded slashes that would climb are refused.
		{method: "GET", target: "/../../etc/passwd", status: 404, check: noSecret},
		{method: "GET", target: "/a/../../outside/secret.txt", status: 404, check: noSecret},
		{method: "GET", target: "/%2e%2e/%2e%2e/etc/passwd", status: 404, check: noSecret},
		{method: "GET", target: "/a/..%2f..%2foutside%2fsecret.txt", status: 400, check: noSecret},
		{method: "GET", target: "/a/b/../../css/site.css", status: 200, check: wantBody(files["css/site.css"])},
		{method: "GET", target: "/a%00.txt", status: 400},
		{method: "GET", target: "/%ff%fe.txt", status: 400},
		// Symlinks inside the root and pointing outside it.
		{method: "GET", target: "/link-in", status: 200, check: wantBody(files["css/site.css"])},
		{method: "GET", target: "/a/b/dir-link/app.js", status: 200, check: wantBody(files["js/app.js"])},
		{method: "GET", target: "/link-out", status: 403, check: noSecret},
		{method: "GET", target: "/link-out-rel", status: 403, check: noSecret},
		{method: "GET", target: "/a/dir-out/secret.txt", status: 403, check: noSecret},
		{method: "GET", target: "/a/b/c/d/up-twice", status: 403, check: noSecret},
		{method: "GET", target: "/link-etc", status: 403, check: noSecret},
		{method: "GET", target: "/a/b/c/loop", status: 403},
		{method: "GET", target: "/dangling", status: 404},
		// Empty and large files (sendfile, also from an offset).
		{method: "GET", target: "/empty.txt", status: 200, check: all(wantBody(""), wantHeader("Content-Length", "0"))},
		{method: "GET", target: "/large.bin", status: 200, check: all(wantBody(large), wantHeader("Content-Type", "application/octet-stream"))},
		// Types never guessed.
		{method: "GET", target: "/upload", status: 200, check: all(wantBody(files["upload"]), wantHeader("Content-Type", "application/octet-stream"), wantHeader("X-Content-Type-Options", "nosniff"))},
		// Precompressed sibling.
		{method: "GET", target: "/js/app.js", hdr: []string{"Accept-Encoding", "gzip, br"}, status: 200, check: all(wantBody("gzip bytes"), wantHeader("Content-Encoding", "gzip"), wantHeader("Vary", "Accept-Encoding"))},
		{method: "GET", target: "/js/app.js", status: 200, check: all(wantBody(files["js/app.js"]), wantHeader("Vary", "Accept-Encoding"))},
		// Range and multi-range.
		{method: "GET", target: "/range.txt", hdr: []string{"Range", "bytes=10-19"}, status: 206, check: all(wantBody(rangeTxt[10:20]), wantHeader("Content-Range", "bytes 10-19/1000"))},
		{method: "GET", target: "/large.bin", hdr: []string{"Range", "bytes=-100"}, status: 206, check: wantBody(large[len(large)-100:])},
		{method: "GET", target: "/large.bin", hdr: []string{"Range", "bytes=1000000-2999999"}, status: 206, check: wantBody(large[1000000:3000000])},
		{method: "GET", target: "/range.txt", hdr: []string{"Range", "bytes=0-0,500-500,900-"}, status: 206, check: func(r *http.Response, b []byte) error {
			if !strings.HasPrefix(r.Header.Get("Content-Type"), "multipart/byteranges; boundary=") || bytes.Count(b, []byte("Content-Range: bytes")) != 3 {
				return fmt.Errorf("not three parts: %q %.300q", r.Header.Get("Content-Type"), b)
			}
			return nil
		}},
		{method: "GET", target: "/range.txt", hdr: []string{"Range", "bytes=0-4,3-9"}, status: 206, check: all(wantBody(rangeTxt[:10]), wantHeader("Content-Range", "bytes 0-9/1000"))},
		{method: "GET", target: "/range.txt", hdr: []string{"Range", "bytes=2000-"}, status: 416, check: wantHeader("Content-Range", "bytes */1000")},
		{method: "GET", target: "/range.txt", hdr: []string{"Range", "lines=1-2"}, status: 200, check: wantBody(rangeTxt)},
		// HEAD.
		{method: "HEAD", target: "/large.bin", status: 200, check: all(wantBody(""), wantHeader("Content-Length", strconv.Itoa(len(large))))},
		{method: "HEAD", target: "/a/b/c/d", status: 301},
		{method: "HEAD", target: "/missing", status: 404},
		{method: "POST", target: "/css/site.css", body: "x", status: 405},
	}
	rc.run(t, staticExchanges)

	// Validators: take the file's own, then ask conditionally.
	resp, _, err := rc.do(exchange{method: "GET", target: "/css/site.css"})
	if err != nil {
		t.Fatal(err)
	}
	etag, lastModified = resp.Header.Get("Etag"), resp.Header.Get("Last-Modified")
	if etag == "" || strings.HasPrefix(etag, "W/") || lastModified == "" {
		t.Fatalf("ETag %q Last-Modified %q", etag, lastModified)
	}
	rc.run(t, []exchange{
		{method: "GET", target: "/css/site.css", hdr: []string{"If-None-Match", etag}, status: 304, check: wantBody("")},
		{method: "GET", target: "/css/site.css", hdr: []string{"If-None-Match", `"stale"`}, status: 200},
		{method: "GET", target: "/css/site.css", hdr: []string{"If-Modified-Since", lastModified}, status: 304},
		{method: "GET", target: "/css/site.css", hdr: []string{"If-Modified-Since", "Thu, 01 Jan 1970 00:00:00 GMT"}, status: 200},
		{method: "GET", target: "/css/site.css", hdr: []string{"If-Match", `"stale"`}, status: 412},
		{method: "GET", target: "/range.txt", hdr: []string{"If-Range", `"stale"`, "Range", "bytes=0-1"}, status: 200},
	})

	// respond, the metrics route (allowed and refused) and an embedded
	// handler.
	upload := strings.Repeat("u", 3<<20)
	uploadSum := fmt.Sprintf("%x", sha256.Sum256([]byte(upload)))
	rc.run(t, []exchange{
		{method: "GET", target: "/respond", status: 200, check: wantBody("fixed\n")},
		{method: "HEAD", target: "/respond", status: 200, check: wantBody("")},
		{method: "POST", target: "/respond", body: "some body", status: 200, check: wantBody("fixed\n")},
		{method: "GET", target: "/metrics", status: 200, check: func(_ *http.Response, b []byte) error {
			if !bytes.Contains(b, []byte("gatehouse_")) {
				return fmt.Errorf("no metrics: %.200q", b)
			}
			return nil
		}},
		{method: "GET", target: "/echo", status: 200, check: wantBody("GET 0 " + fmt.Sprintf("%x", sha256.Sum256(nil)) + "\n")},
		{method: "GET", target: "/echo?chunks=5", status: 200, check: func(r *http.Response, b []byte) error {
			if len(r.TransferEncoding) == 0 || !bytes.HasPrefix(b, []byte("part 0\npart 1\n")) {
				return fmt.Errorf("not streamed: %v %.100q", r.TransferEncoding, b)
			}
			return nil
		}},
		{method: "POST", target: "/echo", body: upload, status: 200, check: wantBody("POST 3145728 " + uploadSum + "\n")},
		{method: "POST", target: "/echo", body: upload, chunked: true, status: 200, check: wantBody("POST 3145728 " + uploadSum + "\n")},
	})
	refused := &rawClient{tb: t, src: "127.0.0.2", dst: h.addr}
	refused.run(t, []exchange{{method: "GET", target: "/metrics", status: 403}})
	refused.close()

	// proxy: chunked and streamed answers, resets, slow upstreams, large
	// bodies both ways, and a missing Content-Type left missing.
	rc.run(t, []exchange{
		{method: "GET", target: "/up/chunked", status: 200, check: wantBody("chunk 0\nchunk 1\nchunk 2\nchunk 3\nchunk 4\n")},
		{method: "GET", target: "/up/stream", status: 200, check: wantBody("event 0\nevent 1\nevent 2\nevent 3\nevent 4\n")},
		{method: "GET", target: "/up/reset", status: 502},
		{method: "GET", target: "/up/reset-mid-body", status: 200, cut: true},
		{method: "GET", target: "/up/slow", status: 200, check: wantBody("late but in time\n")},
		{method: "GET", target: "/up/too-slow", status: 504},
		{method: "GET", target: "/up/big", status: 200, check: func(_ *http.Response, b []byte) error {
			if len(b) != 4200000 {
				return fmt.Errorf("%d bytes, want 4200000", len(b))
			}
			return nil
		}},
		{method: "POST", target: "/up/echo", body: upload, status: 200, check: wantBody("3145728 " + uploadSum + "\n")},
		{method: "POST", target: "/up/echo", body: upload, chunked: true, status: 200, check: wantBody("3145728 " + uploadSum + "\n")},
		{method: "GET", target: "/up/untyped", status: 200, check: wantHeader("Content-Type", "")},
		{method: "GET", target: "/up/missing", status: 404},
	})

	// proxy upgrade: a WebSocket relayed (spliced) both ways, then closed
	// by the client.
	ws, status := wsDial(t, "127.0.0.1", h.addr, "/up/ws")
	if ws == nil {
		t.Fatalf("WebSocket handshake: %d", status)
	}
	for _, n := range []int{0, 125, 126, 65536, 500000} {
		if err := ws.exchange(wsBinary, bytes.Repeat([]byte{byte(n)}, n)); err != nil {
			t.Fatalf("WebSocket message of %d bytes: %v", n, err)
		}
	}
	wsWriteFrame(ws.c, wsClose, nil, true)
	if err := expectClosed(ws.c, 10*time.Second); err != nil {
		t.Fatalf("WebSocket after its close: %v", err)
	}

	checkNoDeaths(t, h)
	exerciseVhosts(t)
}

// TestMissingPathsNeverKill is issue 10's acceptance: 1000 requests for
// random nested missing paths from one client are all answered 404, and no
// worker dies.
func TestMissingPathsNeverKill(t *testing.T) {
	dir := workerReadableTempDir(t)
	www := filepath.Join(dir, "www")
	writeTree(t, www, map[string]string{"index.html": "x", "a/b/c/file.txt": "x", "css/site.css": "x"})
	h := start(t, fmt.Sprintf(`
workers {
  count       = 2
  concurrency = 4
}
log {
  access_log = false
}
sandbox {
  mode           = "strict"
  seccomp_action = "kill"
}
route "/" {
  static {
    root = %q
  }
}
`, www))
	rc := &rawClient{tb: t, src: "127.0.0.3", dst: h.addr}
	defer rc.close()
	rng := rand.New(rand.NewPCG(10, 1000))
	// Existing directories as prefixes, so the lookup fails at every depth.
	prefixes := []string{"", "/a", "/a/b", "/a/b/c", "/css"}
	const n = 1000
	got := map[int]int{}
	for i := range n {
		p := prefixes[rng.IntN(len(prefixes))]
		for range 1 + rng.IntN(8) {
			p += "/" + strconv.FormatUint(rng.Uint64(), 36)[:1+rng.IntN(10)]
		}
		if rng.IntN(4) == 0 {
			p += ".css"
		}
		resp, _, err := rc.do(exchange{method: "GET", target: p})
		if err != nil {
			checkNoDeaths(t, h)
			t.Fatalf("request %d (%s): %v", i, p, err)
		}
		got[resp.StatusCode]++
		if resp.StatusCode != 404 {
			checkNoDeaths(t, h)
			t.Fatalf("request %d (%s): status %d, want 404", i, p, resp.StatusCode)
		}
	}
	if got[404] != n {
		t.Errorf("statuses %v, want all %d 404", got, n)
	}
	checkNoDeaths(t, h)
}
