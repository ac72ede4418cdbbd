package static

import (
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/hashicorp/go-hclog"
)

// defaultCfg is a static block with every default.
func defaultCfg() config.Static {
	return config.Static{Index: "index.html", DefaultType: config.DefaultStaticType, Precompressed: true, MaxRanges: config.DefaultMaxRanges}
}

// tree writes files (name -> content; a name ending in "/" is a directory)
// under a new root and returns a handler for it on route prefix.
func tree(tb testing.TB, prefix string, cfg config.Static, files map[string]string) (*Handler, string) {
	tb.Helper()
	dir := tb.TempDir()
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
	root, err := os.OpenRoot(dir)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { root.Close() })
	return New(prefix, root, &cfg, hclog.NewNullLogger()), dir
}

// do serves one request; target is sent as is (percent-encoded).
func do(h http.Handler, method, target string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func wantStatus(t *testing.T, w *httptest.ResponseRecorder, target string, want int) {
	t.Helper()
	if w.Code != want {
		t.Errorf("%s: status %d, want %d (body %q)", target, w.Code, want, w.Body.String())
	}
}

func TestContentTypeNeverSniffed(t *testing.T) {
	html := "<html><script>alert(1)</script></html>"
	h, _ := tree(t, "/", defaultCfg(), map[string]string{
		"upload":        html,
		"upload.xyz":    html,
		"page.html":     html,
		"font.woff2":    "wOF2",
		"font.woff":     "wOFF",
		"STYLE.CSS":     "body{}",
		"app.js":        "1",
		"a.svg":         "<svg/>",
		"m.wasm":        "\x00asm",
		"notes.txt":     html,
		"data.json":     "{}",
		"photo.webp":    "RIFF",
		"icon.ico":      "",
		"video.mp4":     "",
		"index.html.gz": "",
	})
	tests := []struct{ path, want string }{
		{"/upload", "application/octet-stream"},
		{"/upload.xyz", "application/octet-stream"},
		{"/page.html", "text/html; charset=utf-8"},
		{"/font.woff2", "font/woff2"},
		{"/font.woff", "font/woff"},
		{"/STYLE.CSS", "text/css; charset=utf-8"},
		{"/app.js", "text/javascript; charset=utf-8"},
		{"/a.svg", "image/svg+xml"},
		{"/m.wasm", "application/wasm"},
		{"/notes.txt", "text/plain; charset=utf-8"},
		{"/data.json", "application/json"},
		{"/photo.webp", "image/webp"},
		{"/icon.ico", "image/x-icon"},
		{"/video.mp4", "video/mp4"},
		{"/index.html.gz", "application/gzip"},
	}
	for _, tt := range tests {
		w := do(h, "GET", tt.path)
		wantStatus(t, w, tt.path, 200)
		if got := w.Header().Get("Content-Type"); got != tt.want {
			t.Errorf("%s: Content-Type %q, want %q", tt.path, got, tt.want)
		}
	}

	cfg := defaultCfg()
	cfg.DefaultType = "text/plain"
	h, _ = tree(t, "/", cfg, map[string]string{"upload": html})
	if got := do(h, "GET", "/upload").Header().Get("Content-Type"); got != "text/plain" {
		t.Errorf("with default_type text/plain: Content-Type %q", got)
	}
}

func TestETag(t *testing.T) {
	h, _ := tree(t, "/", defaultCfg(), map[string]string{"a.txt": "hello", "b.txt": "hello"})
	w := do(h, "GET", "/a.txt")
	tag := w.Header().Get("Etag")
	if !strings.HasPrefix(tag, `"`) || !strings.HasSuffix(tag, `"`) || len(tag) < 4 {
		t.Fatalf("ETag %q is not a strong entity tag", tag)
	}
	if other := do(h, "GET", "/b.txt").Header().Get("Etag"); other == "" || w.Header().Get("Last-Modified") == "" {
		t.Fatalf("b.txt: ETag %q, Last-Modified %q", other, w.Header().Get("Last-Modified"))
	}
	tests := []struct {
		name   string
		hdr    []string
		status int
	}{
		{"If-None-Match same", []string{"If-None-Match", tag}, 304},
		{"If-None-Match weak same", []string{"If-None-Match", "W/" + tag}, 304},
		{"If-None-Match list", []string{"If-None-Match", `"x", ` + tag}, 304},
		{"If-None-Match star", []string{"If-None-Match", "*"}, 304},
		{"If-None-Match other", []string{"If-None-Match", `"other"`}, 200},
		{"If-Match same", []string{"If-Match", tag}, 200},
		{"If-Match weak", []string{"If-Match", "W/" + tag}, 412},
		{"If-Match other", []string{"If-Match", `"other"`}, 412},
		{"If-Modified-Since later", []string{"If-Modified-Since", time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)}, 304},
		{"If-Modified-Since earlier", []string{"If-Modified-Since", time.Unix(0, 0).UTC().Format(http.TimeFormat)}, 200},
		{"If-Range same", []string{"If-Range", tag, "Range", "bytes=0-1"}, 206},
		{"If-Range other", []string{"If-Range", `"other"`, "Range", "bytes=0-1"}, 200},
	}
	for _, tt := range tests {
		w := do(h, "GET", "/a.txt", tt.hdr...)
		wantStatus(t, w, tt.name, tt.status)
		if tt.status == 304 && (w.Header().Get("Etag") != tag || w.Body.Len() != 0) {
			t.Errorf("%s: 304 with ETag %q and %d body bytes", tt.name, w.Header().Get("Etag"), w.Body.Len())
		}
	}
	// A changed file gets a new tag.
	h2, dir := tree(t, "/", defaultCfg(), map[string]string{"c.txt": "one"})
	before := do(h2, "GET", "/c.txt").Header().Get("Etag")
	os.WriteFile(filepath.Join(dir, "c.txt"), []byte("two!"), 0o644)
	if after := do(h2, "GET", "/c.txt").Header().Get("Etag"); after == before {
		t.Errorf("ETag %q unchanged after the file changed", after)
	}
}

func TestPrecompressed(t *testing.T) {
	files := map[string]string{
		"app.js":            "console.log('identity')",
		"app.js.gz":         "GZ",
		"app.js.br":         "BROTLI",
		"only.css":          "body{}",
		"gz.css":            "body{color:red}",
		"gz.css.gz":         "GZIPPED",
		"dir/index.html":    "<p>identity</p>",
		"dir/index.html.br": "BR",
	}
	h, _ := tree(t, "/", defaultCfg(), files)
	tests := []struct {
		path, accept string
		body, coding string
		vary         bool
		ctype        string
	}{
		{"/app.js", "", files["app.js"], "", true, "text/javascript; charset=utf-8"},
		{"/app.js", "gzip", "GZ", "gzip", true, "text/javascript; charset=utf-8"},
		{"/app.js", "gzip, deflate, br", "BROTLI", "br", true, "text/javascript; charset=utf-8"},
		{"/app.js", "br;q=0.5, gzip", "GZ", "gzip", true, "text/javascript; charset=utf-8"},
		{"/app.js", "br;q=0, gzip;q=0", files["app.js"], "", true, "text/javascript; charset=utf-8"},
		{"/app.js", "*", "BROTLI", "br", true, "text/javascript; charset=utf-8"},
		{"/app.js", "*;q=0", files["app.js"], "", true, "text/javascript; charset=utf-8"},
		{"/app.js", "x-gzip", "GZ", "gzip", true, "text/javascript; charset=utf-8"},
		{"/gz.css", "br, gzip", "GZIPPED", "gzip", true, "text/css; charset=utf-8"},
		{"/gz.css", "br", files["gz.css"], "", true, "text/css; charset=utf-8"},
		{"/only.css", "gzip, br", files["only.css"], "", false, "text/css; charset=utf-8"},
		{"/dir/", "br", "BR", "br", true, "text/html; charset=utf-8"},
	}
	for _, tt := range tests {
		w := do(h, "GET", tt.path, "Accept-Encoding", tt.accept)
		name := tt.path + " accepting " + strconv.Quote(tt.accept)
		wantStatus(t, w, name, 200)
		if w.Body.String() != tt.body || w.Header().Get("Content-Encoding") != tt.coding ||
			w.Header().Get("Content-Length") != strconv.Itoa(len(tt.body)) || w.Header().Get("Content-Type") != tt.ctype {
			t.Errorf("%s: body %q coding %q length %q type %q, want %q %q %d %q", name, w.Body.String(), w.Header().Get("Content-Encoding"),
				w.Header().Get("Content-Length"), w.Header().Get("Content-Type"), tt.body, tt.coding, len(tt.body), tt.ctype)
		}
		if got := w.Header().Get("Vary") == "Accept-Encoding"; got != tt.vary {
			t.Errorf("%s: Vary %q", name, w.Header().Get("Vary"))
		}
	}
	// Each representation has its own validator; a range is of the
	// compressed bytes.
	id, br := do(h, "GET", "/app.js").Header().Get("Etag"), do(h, "GET", "/app.js", "Accept-Encoding", "br").Header().Get("Etag")
	if id == br {
		t.Errorf("identity and br share ETag %q", id)
	}
	w := do(h, "GET", "/app.js", "Accept-Encoding", "br", "Range", "bytes=1-2")
	if w.Code != 206 || w.Body.String() != "RO" || w.Header().Get("Content-Encoding") != "br" || w.Header().Get("Content-Range") != "bytes 1-2/6" {
		t.Errorf("range of br: %d %q %v", w.Code, w.Body.String(), w.Header())
	}
	w = do(h, "GET", "/app.js", "Accept-Encoding", "br", "If-None-Match", br)
	if w.Code != 304 || w.Header().Get("Content-Encoding") != "" || w.Header().Get("Vary") != "Accept-Encoding" {
		t.Errorf("304 of br: %d %v", w.Code, w.Header())
	}

	cfg := defaultCfg()
	cfg.Precompressed = false
	h, _ = tree(t, "/", cfg, files)
	w = do(h, "GET", "/app.js", "Accept-Encoding", "gzip, br")
	if w.Body.String() != files["app.js"] || w.Header().Get("Content-Encoding") != "" || w.Header().Get("Vary") != "" {
		t.Errorf("precompressed = false: %q %v", w.Body.String(), w.Header())
	}
}

func TestDirectories(t *testing.T) {
	files := map[string]string{
		"with/index.html":     "INDEX",
		"without/a.txt":       "a",
		"my dir/ü/index.html": "UTF",
		"evil.com/index.html": "E",
		"a.txt":               "A",
		"empty/":              "",
	}
	h, _ := tree(t, "/", defaultCfg(), files)
	tests := []struct {
		target   string
		status   int
		location string
		body     string
	}{
		{"/with", 301, "/with/", ""},
		{"/without", 301, "/without/", ""},
		{"/empty", 301, "/empty/", ""},
		{"/with?q=1", 301, "/with/?q=1", ""},
		{"/my%20dir/%C3%BC", 301, "/my%20dir/%C3%BC/", ""},
		{"//evil.com", 301, "/evil.com/", ""},
		{"/with/.", 200, "", "INDEX"},
		{"/with/", 200, "", "INDEX"},
		{"/my%20dir/%C3%BC/", 200, "", "UTF"},
		{"/without/", 403, "", "403 Forbidden\n"},
		{"/empty/", 403, "", "403 Forbidden\n"},
		{"/a.txt/", 404, "", "404 page not found\n"},
		{"/with/index.html", 200, "", "INDEX"},
	}
	for _, tt := range tests {
		w := do(h, "GET", tt.target)
		wantStatus(t, w, tt.target, tt.status)
		if got := w.Header().Get("Location"); got != tt.location {
			t.Errorf("%s: Location %q, want %q", tt.target, got, tt.location)
		}
		if tt.body != "" && w.Body.String() != tt.body {
			t.Errorf("%s: body %q, want %q", tt.target, w.Body.String(), tt.body)
		}
	}

	// Below a prefix, the redirect keeps the prefix; the prefix itself is
	// the root directory.
	h, _ = tree(t, "/files/", defaultCfg(), files)
	for target, loc := range map[string]string{"/files": "/files/", "/files/with": "/files/with/"} {
		w := do(h, "GET", target)
		if w.Code != 301 || w.Header().Get("Location") != loc {
			t.Errorf("%s: %d Location %q, want 301 %q", target, w.Code, w.Header().Get("Location"), loc)
		}
	}

	cfg := defaultCfg()
	cfg.Listing = true
	h, _ = tree(t, "/", cfg, files)
	w := do(h, "GET", "/without")
	wantStatus(t, w, "/without with listing", 301)
	w = do(h, "GET", "/")
	want := "<!doctype html>\n<meta name=\"viewport\" content=\"width=device-width\">\n<pre>\n" +
		"<a href=\"a.txt\">a.txt</a>\n<a href=\"empty/\">empty/</a>\n<a href=\"evil.com/\">evil.com/</a>\n" +
		"<a href=\"my%20dir/\">my dir/</a>\n<a href=\"with/\">with/</a>\n<a href=\"without/\">without/</a>\n</pre>\n"
	if w.Code != 200 || w.Body.String() != want || w.Header().Get("Content-Type") != "text/html; charset=utf-8" {
		t.Errorf("listing: %d %q\nwant %q", w.Code, w.Body.String(), want)
	}
}

func TestRanges(t *testing.T) {
	content := strings.Repeat("0123456789", 100) // 1000 bytes
	cfg := defaultCfg()
	cfg.MaxRanges = 4
	h, _ := tree(t, "/", cfg, map[string]string{"f.txt": content, "empty.txt": ""})
	tests := []struct {
		rng          string
		status       int
		contentRange string
		body         string
		parts        int
	}{
		{"items=0-5", 200, "", content, 0},
		{"bytes 0-5", 200, "", content, 0},
		{"bytes=0-4", 206, "bytes 0-4/1000", "01234", 0},
		{"Bytes=0-4", 206, "bytes 0-4/1000", "01234", 0},
		{"bytes=-3", 206, "bytes 997-999/1000", "789", 0},
		{"bytes=995-", 206, "bytes 995-999/1000", "56789", 0},
		{"bytes=995-5000", 206, "bytes 995-999/1000", "56789", 0},
		{"bytes=1000-", 416, "bytes */1000", "", 0},
		{"bytes=5000-6000,2000-", 416, "bytes */1000", "", 0},
		{"bytes=-0", 416, "bytes */1000", "", 0},
		{"bytes=5-2", 416, "bytes */1000", "", 0},
		{"bytes=x-2", 416, "bytes */1000", "", 0},
		{"bytes=", 416, "bytes */1000", "", 0},
		{"bytes=0-4,2-8", 206, "bytes 0-8/1000", "012345678", 0},         // overlapping: merged
		{"bytes=10-19,0-4,5-9", 206, "bytes 0-19/1000", content[:20], 0}, // adjacent, out of order
		{"bytes=0-0,50-50", 206, "bytes 0-50/1000", content[:51], 0},     // a gap under one part's cost
		{"bytes=0-0,500-500", 206, "", "", 2},
		{"bytes=0-0,200-200,400-400,600-600", 206, "", "", 4},
		{"bytes=0-0,200-200,400-400,600-600,800-800", 200, "", content, 0}, // over max_ranges
	}
	for _, tt := range tests {
		w := do(h, "GET", "/f.txt", "Range", tt.rng)
		wantStatus(t, w, tt.rng, tt.status)
		if got := w.Header().Get("Content-Range"); got != tt.contentRange {
			t.Errorf("%s: Content-Range %q, want %q", tt.rng, got, tt.contentRange)
		}
		if tt.body != "" && w.Body.String() != tt.body {
			t.Errorf("%s: body %q, want %q", tt.rng, w.Body.String(), tt.body)
		}
		if tt.parts > 0 {
			if n := countParts(t, w); n != tt.parts {
				t.Errorf("%s: %d parts, want %d", tt.rng, n, tt.parts)
			}
		}
	}
	if w := do(h, "GET", "/empty.txt", "Range", "bytes=0-5"); w.Code != 200 {
		t.Errorf("range of an empty file: %d, want 200", w.Code)
	}

	// Many tiny ranges cost no more than the file.
	var many []string
	for i := 0; i < 999; i += 2 {
		many = append(many, fmt.Sprintf("%d-%d", i, i))
	}
	w := do(h, "GET", "/f.txt", "Range", "bytes="+strings.Join(many, ","))
	if w.Body.Len() > len(content) {
		t.Errorf("%d tiny ranges: %d bytes for a %d-byte file", len(many), w.Body.Len(), len(content))
	}

	cfg.MaxRanges = 0
	h, _ = tree(t, "/", cfg, map[string]string{"f.txt": content})
	w = do(h, "GET", "/f.txt", "Range", "bytes=0-4")
	if w.Code != 200 || w.Header().Get("Accept-Ranges") != "" || w.Body.String() != content {
		t.Errorf("max_ranges = 0: %d Accept-Ranges %q", w.Code, w.Header().Get("Accept-Ranges"))
	}
}

// countParts counts the parts of a multipart/byteranges response.
func countParts(t *testing.T, w *httptest.ResponseRecorder) int {
	t.Helper()
	mt, params, err := mime.ParseMediaType(w.Header().Get("Content-Type"))
	if err != nil || mt != "multipart/byteranges" {
		t.Errorf("Content-Type %q, want multipart/byteranges", w.Header().Get("Content-Type"))
		return 0
	}
	mr := multipart.NewReader(w.Body, params["boundary"])
	n := 0
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			return n
		}
		if err != nil {
			t.Errorf("reading parts: %v", err)
			return n
		}
		n++
		p.Close()
	}
}

func TestBadNames(t *testing.T) {
	h, dir := tree(t, "/", defaultCfg(), map[string]string{
		"a/b/c.txt": "C", "a/inner.txt": "INNER", "top.txt": "TOP", "sub/": "",
	})
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("SECRET"), 0o644)
	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "abs-out"))
	os.Symlink("../../../../../../../../"+outside+"/secret", filepath.Join(dir, "rel-out"))
	os.Symlink(outside, filepath.Join(dir, "dir-out"))
	os.Symlink("../inner.txt", filepath.Join(dir, "a", "b", "link-in"))
	os.Symlink("a/b", filepath.Join(dir, "dir-in"))
	os.Symlink("loop", filepath.Join(dir, "loop"))
	os.Symlink("nowhere", filepath.Join(dir, "dangling"))
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 256)
	tests := []struct {
		target string
		status int
		body   string
	}{
		{"/a%00b", 400, ""},
		{"/a/%00", 400, ""},
		{"/%ff%fe", 400, ""},
		{"/a/%c3", 400, ""},
		{"/..", 400, ""},
		{"/../top.txt", 400, ""},
		{"/a/../../top.txt", 400, ""},
		{"/a/%2e%2e/%2e%2e/etc/passwd", 400, ""},
		{"/a/../top.txt", 200, "TOP"},
		{"/a/./b/../inner.txt", 200, "INNER"},
		{"//a///b//c.txt", 200, "C"},
		{"/" + long, 404, ""},
		{"/" + strings.Repeat("d/", 2100) + "f", 404, ""},
		{"/abs-out", 403, ""},
		{"/rel-out", 403, ""},
		{"/dir-out/secret", 403, ""},
		{"/a/b/link-in", 200, "INNER"},
		{"/dir-in/c.txt", 200, "C"},
		{"/loop", 403, ""},
		{"/dangling", 404, ""},
		{"/fifo", 404, ""},
		{"/missing", 404, ""},
		{"/a/missing", 404, ""},
		{"/a/b/missing/deeper", 404, ""},
		{"/top.txt/x", 404, ""},
	}
	for _, tt := range tests {
		w := do(h, "GET", tt.target)
		wantStatus(t, w, tt.target, tt.status)
		if tt.body != "" && w.Body.String() != tt.body {
			t.Errorf("%s: body %q, want %q", tt.target, w.Body.String(), tt.body)
		}
		if strings.Contains(w.Body.String(), "SECRET") {
			t.Errorf("%s: served the file outside the root", tt.target)
		}
	}
}

func TestMethods(t *testing.T) {
	h, _ := tree(t, "/", defaultCfg(), map[string]string{"f.txt": "12345"})
	w := do(h, "HEAD", "/f.txt")
	if w.Code != 200 || w.Header().Get("Content-Length") != "5" || w.Body.Len() != 0 {
		t.Errorf("HEAD: %d length %q body %d", w.Code, w.Header().Get("Content-Length"), w.Body.Len())
	}
	w = do(h, "POST", "/f.txt")
	if w.Code != 405 || w.Header().Get("Allow") != "GET, HEAD" {
		t.Errorf("POST: %d Allow %q", w.Code, w.Header().Get("Allow"))
	}
}
