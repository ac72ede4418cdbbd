package e2e

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The static handler against Go's http.FileServer on the same generated
// tree (issue 10 item 4): the same status, bytes, Content-Type and
// Content-Length wherever they should agree. The deliberate differences,
// each asserted on its own:
//   - Content-Type of a file whose extension is not in Go's built-in table:
//     FileServer sniffs the content (or asks /etc/mime.types); gatehouse uses
//     its own table and otherwise application/octet-stream.
//   - /dir/index.html: FileServer redirects to /dir/; gatehouse serves it.
//   - /file/: FileServer redirects to /file; gatehouse answers 404 (nginx).
//   - %00 in a path: FileServer answers 404 (the open fails); gatehouse 400.
//   - A suffix range of an empty file: FileServer answers 206 with the
//     invalid "Content-Range: bytes 0--1/0"; gatehouse sends the empty
//     file (200), as for any other range of it.
//   - A Range unit other than bytes: FileServer answers 416; gatehouse
//     ignores the header (200), as RFC 9110 §14.2 requires.
//   - Redirects: both 301; FileServer's Location is relative and bodiless,
//     gatehouse's absolute with a short HTML body, so only the status is
//     compared.
//   - A listing longer than net/http's 2 KiB buffer is chunked by FileServer
//     and has a Content-Length from gatehouse: Content-Length is compared
//     when FileServer sends one; the bytes always.

// goBuiltinTypes is Go's mime package's built-in table. The reference is
// pinned to it, so the machine's /etc/mime.types cannot move it.
var goBuiltinTypes = map[string]string{
	".avif": "image/avif",
	".css":  "text/css; charset=utf-8",
	".gif":  "image/gif",
	".htm":  "text/html; charset=utf-8",
	".html": "text/html; charset=utf-8",
	".jpeg": "image/jpeg",
	".jpg":  "image/jpeg",
	".js":   "text/javascript; charset=utf-8",
	".json": "application/json",
	".mjs":  "text/javascript; charset=utf-8",
	".pdf":  "application/pdf",
	".png":  "image/png",
	".svg":  "image/svg+xml",
	".wasm": "application/wasm",
	".webp": "image/webp",
	".xml":  "text/xml; charset=utf-8",
}

// gatehouseTypes are types gatehouse has built in beyond Go's table; the
// differential checks gatehouse against these and not against FileServer.
var gatehouseTypes = map[string]string{
	".woff2": "font/woff2",
	".woff":  "font/woff",
	".txt":   "text/plain; charset=utf-8",
	".md":    "text/markdown; charset=utf-8",
	".ico":   "image/x-icon",
	".mp4":   "video/mp4",
	".csv":   "text/csv; charset=utf-8",
}

// genTree writes a tree of 31 directories over five levels with seven
// files each (217), odd names, mixed types and sizes, an index.html in some
// directories. It returns the files and directories, slash-separated and
// relative to root ("" is the root).
func genTree(tb testing.TB, root string) (files, dirs []string) {
	tb.Helper()
	rng := rand.New(rand.NewPCG(4, 200))
	dirNames := []string{"a", "b c", "ünï", "日本", "x+y", "dot.dir", "q&a", "50%", "hash#", "semi;colon"}
	bases := []string{"file", "my file", "résumé", "日本語", "a+b", "100%", "q?x", "hash#1", "it's", "&amp", "UPPER", "dotted.name", ".hidden", "  lead"}
	var exts []string
	for e := range goBuiltinTypes {
		exts = append(exts, e)
	}
	for e := range gatehouseTypes {
		exts = append(exts, e)
	}
	exts = append(exts, "", "", ".dat", ".xyz", ".HTML", ".Css")
	// Map iteration is random: sort for a reproducible tree.
	slices.Sort(exts)
	sizes := []int{0, 1, 100, 511, 512, 513, 4095, 4096, 4097, 20000, 70000}
	n := 0
	var walk func(rel string, depth int)
	walk = func(rel string, depth int) {
		dirs = append(dirs, rel)
		if err := os.MkdirAll(filepath.Join(root, filepath.FromSlash(rel)), 0o755); err != nil {
			tb.Fatal(err)
		}
		for i := range 7 {
			n++
			name := fmt.Sprintf("%s-%d%s", bases[rng.IntN(len(bases))], n, exts[rng.IntN(len(exts))])
			if i == 0 && len(dirs)%3 == 0 {
				name = "index.html"
			}
			size := sizes[rng.IntN(len(sizes))]
			if n%40 == 0 {
				size = 1 << 20
			}
			var content []byte
			switch rng.IntN(3) {
			case 0:
				content = bytes.Repeat([]byte("<html><script>alert(1)</script>\n"), size/32+1)[:size]
			case 1:
				content = bytes.Repeat([]byte("plain text line\n"), size/16+1)[:size]
			default:
				content = make([]byte, size)
				for j := range content {
					content[j] = byte(rng.Uint32())
				}
			}
			f := path.Join(rel, name)
			if err := os.WriteFile(filepath.Join(root, filepath.FromSlash(f)), content, 0o644); err != nil {
				tb.Fatal(err)
			}
			files = append(files, f)
		}
		if depth == 4 {
			return
		}
		for range 2 {
			walk(path.Join(rel, fmt.Sprintf("%s-%d", dirNames[rng.IntN(len(dirNames))], len(dirs))), depth+1)
		}
	}
	walk("", 0)
	return files, dirs
}

// escapePath percent-encodes each segment of a slash-separated path.
func escapePath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return "/" + strings.Join(segs, "/")
}

func TestStaticDifferential(t *testing.T) {
	for ext, typ := range goBuiltinTypes {
		if err := mime.AddExtensionType(ext, typ); err != nil {
			t.Fatal(err)
		}
	}
	dir := workerReadableTempDir(t)
	www := filepath.Join(dir, "www")
	files, dirs := genTree(t, www)
	if len(files) < 200 || len(dirs) < 31 {
		t.Fatalf("tree of %d files in %d directories", len(files), len(dirs))
	}
	if err := os.WriteFile(filepath.Join(dir, "secret.txt"), []byte("SECRET"), 0o644); err != nil {
		t.Fatal(err)
	}
	ref := httptest.NewServer(http.FileServer(http.Dir(www)))
	defer ref.Close()
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
    root    = %q
    listing = true
  }
}
`, www))
	gh := &rawClient{tb: t, src: "127.0.0.1", dst: h.addr}
	defer gh.close()
	rf := &rawClient{tb: t, src: "127.0.0.1", dst: strings.TrimPrefix(ref.URL, "http://")}
	defer rf.close()

	type answer struct {
		status         int
		body           []byte
		ctype, clength string
		contentRange   string
	}
	fetch := func(rc *rawClient, ex exchange) answer {
		t.Helper()
		resp, body, err := rc.do(ex)
		if err != nil {
			t.Fatalf("%s %s: %v", ex.method, ex.target, err)
		}
		return answer{resp.StatusCode, body, resp.Header.Get("Content-Type"), resp.Header.Get("Content-Length"), resp.Header.Get("Content-Range")}
	}
	both := func(ex exchange) (g, r answer) { return fetch(gh, ex), fetch(rf, ex) }
	compared := 0
	same := func(what string, g, r answer, typeToo bool) {
		t.Helper()
		compared++
		if g.status != r.status || !bytes.Equal(g.body, r.body) || r.clength != "" && g.clength != r.clength || typeToo && g.ctype != r.ctype || g.contentRange != r.contentRange {
			t.Errorf("%s:\n gatehouse  %d type %q length %q range %q body %d bytes %.60q\n FileServer %d type %q length %q range %q body %d bytes %.60q",
				what, g.status, g.ctype, g.clength, g.contentRange, len(g.body), g.body, r.status, r.ctype, r.clength, r.contentRange, len(r.body), r.body)
		}
	}

	for i, f := range files {
		target := escapePath(f)
		ext := strings.ToLower(path.Ext(f))
		g, r := both(exchange{method: "GET", target: target})
		if path.Base(f) == "index.html" {
			// Deliberate: FileServer redirects .../index.html to .../.
			content, _ := os.ReadFile(filepath.Join(www, filepath.FromSlash(f)))
			if g.status != 200 || !bytes.Equal(g.body, content) || r.status != 301 {
				t.Errorf("%s: gatehouse %d, FileServer %d; want 200 and 301", target, g.status, r.status)
			}
			continue
		}
		_, goKnows := goBuiltinTypes[ext]
		same("GET "+target, g, r, goKnows)
		if !goKnows {
			want, ok := gatehouseTypes[ext]
			if !ok {
				want = "application/octet-stream"
			}
			if g.ctype != want {
				t.Errorf("%s: gatehouse Content-Type %q, want %q (FileServer: %q)", target, g.ctype, want, r.ctype)
			}
		}
		if i%5 == 0 {
			g, r = both(exchange{method: "HEAD", target: target})
			same("HEAD "+target, g, r, goKnows)
			for _, rng := range []string{"bytes=0-99", "bytes=-10", "bytes=100-"} {
				g, r = both(exchange{method: "GET", target: target, hdr: []string{"Range", rng}})
				if rng == "bytes=-10" && len(g.body) == 0 && g.status == 200 {
					if r.status != 206 || r.contentRange != "bytes 0--1/0" {
						t.Errorf("%s Range %s of an empty file: FileServer %d %q", target, rng, r.status, r.contentRange)
					}
					continue
				}
				same("GET "+target+" Range "+rng, g, r, goKnows)
			}
			// Deliberate: an unknown unit is ignored, not refused.
			g, r = both(exchange{method: "GET", target: target, hdr: []string{"Range", "lines=1-2"}})
			if g.status != 200 || r.status != 416 {
				t.Errorf("%s Range lines=1-2: gatehouse %d, FileServer %d; want 200 and 416", target, g.status, r.status)
			}
			// Deliberate: a file named as a directory.
			g, r = both(exchange{method: "GET", target: target + "/"})
			if g.status != 404 || r.status != 301 {
				t.Errorf("%s/: gatehouse %d, FileServer %d; want 404 and 301", target, g.status, r.status)
			}
		}
	}
	for _, d := range dirs {
		target := escapePath(d)
		if d != "" {
			g, r := both(exchange{method: "GET", target: target})
			if g.status != 301 || r.status != 301 {
				t.Errorf("%s: gatehouse %d, FileServer %d; want both 301", target, g.status, r.status)
			}
			target += "/"
		}
		g, r := both(exchange{method: "GET", target: target})
		same("GET "+target, g, r, true)
		g, r = both(exchange{method: "GET", target: target + "missing.txt"})
		same("GET "+target+"missing.txt", g, r, true)
		g, r = both(exchange{method: "GET", target: target + "no/such/dir/x"})
		same("GET "+target+"no/such/dir/x", g, r, true)
	}
	// Dot segments that stay inside the root agree.
	for _, f := range files[:20] {
		if path.Base(f) == "index.html" {
			continue
		}
		target := "/" + strings.Repeat("zz/../", 2) + strings.TrimPrefix(escapePath(f), "/")
		g, r := both(exchange{method: "GET", target: target})
		_, goKnows := goBuiltinTypes[strings.ToLower(path.Ext(f))]
		same("GET "+target, g, r, goKnows)
	}
	// Traversal: ".." never climbs above the root, in either (404 for what
	// is not there); encoded slashes that would climb once decoded are
	// refused by gatehouse (400). Neither serves the file outside.
	for _, tc := range []struct {
		target string
		status int
	}{
		{"/../secret.txt", 404},
		{"/../../../secret.txt", 404},
		{"/%2e%2e/secret.txt", 404},
		{escapePath(dirs[1]) + "/../../secret.txt", 404},
		{"/a/..%2f..%2f..%2fsecret.txt", 400},
	} {
		g, r := both(exchange{method: "GET", target: tc.target})
		if g.status != tc.status || r.status != 404 || bytes.Contains(g.body, []byte("SECRET")) || bytes.Contains(r.body, []byte("SECRET")) {
			t.Errorf("%s: gatehouse %d, FileServer %d; want %d and 404, never the file", tc.target, g.status, r.status, tc.status)
		}
	}
	g, r := both(exchange{method: "GET", target: "/x%00.txt"})
	if g.status != 400 || r.status != 404 {
		t.Errorf("/x%%00.txt: gatehouse %d, FileServer %d; want 400 and 404", g.status, r.status)
	}
	t.Logf("%d files in %d directories; %d answers identical", len(files), len(dirs), compared)
	checkNoDeaths(t, h)
}
