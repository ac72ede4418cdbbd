package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// nginxGzip is nginx's compression set as the compress block's defaults
// where nginx has an equivalent (gzip_vary is on in startNginx's
// configuration; gzip_comp_level stays at nginx's default, 1).
const nginxGzip = `
  gzip on;
  gzip_types text/css;
  gzip_min_length 1024;
  gzip_proxied any;
`

// TestCompressAgainstNginx: gatehouse's compress {} and nginx's gzip on
// the same files answer alike: gzip with Vary and a weak ETag above the
// minimum length, HEAD included; identity without Vary under it; identity
// with Vary to a client that takes no gzip; each decoding to the file.
func TestCompressAgainstNginx(t *testing.T) {
	needDecoders(t)
	dir := workerReadableTempDir(t)
	www := filepath.Join(dir, "www")
	files := map[string][]byte{
		"page.html": webText(8<<10, 1),
		"big.css":   webText(1<<20, 2),
		"small.css": webText(500, 3),
	}
	m := map[string]string{}
	for k, v := range files {
		m[k] = string(v)
	}
	writeTree(t, www, m)
	ng, _ := startNginxWith(t, www, nginxGzip)
	h := start(t, fmt.Sprintf(`
workers {
  count = 2
}
log {
  access_log = false
}
route "/" {
  static {
    root = %q
  }
  compress {}
}
`, www))
	gh := &rawClient{tb: t, src: "127.0.0.1", dst: h.addr}
	defer gh.close()
	nx := &rawClient{tb: t, src: "127.0.0.1", dst: ng}
	defer nx.close()
	for _, tc := range []struct {
		ex     exchange
		coding string // both answer with this Content-Encoding
		vary   bool   // both send Vary: Accept-Encoding
		file   string // the body both decode to
	}{
		{exchange{method: "GET", target: "/page.html", hdr: []string{"Accept-Encoding", "gzip"}}, "gzip", true, "page.html"},
		{exchange{method: "GET", target: "/big.css", hdr: []string{"Accept-Encoding", "gzip"}}, "gzip", true, "big.css"},
		{exchange{method: "GET", target: "/big.css", hdr: []string{"Accept-Encoding", "deflate, gzip;q=0.5"}}, "gzip", true, "big.css"},
		{exchange{method: "GET", target: "/small.css", hdr: []string{"Accept-Encoding", "gzip"}}, "", false, "small.css"},
		{exchange{method: "GET", target: "/big.css"}, "", true, "big.css"},
		{exchange{method: "GET", target: "/big.css", hdr: []string{"Accept-Encoding", "gzip;q=0"}}, "", true, "big.css"},
		{exchange{method: "HEAD", target: "/big.css", hdr: []string{"Accept-Encoding", "gzip"}}, "gzip", true, ""},
	} {
		ex := tc.ex
		name := fmt.Sprintf("%s %s %q", ex.method, ex.target, ex.hdr)
		gr, gb := mustDo(t, gh, ex)
		nr, nb := mustDo(t, nx, ex)
		for _, side := range []struct {
			who  string
			res  *http.Response
			body []byte
		}{{"gatehouse", gr, gb}, {"nginx", nr, nb}} {
			res := side.res
			if res.StatusCode != 200 || res.Header.Get("Content-Encoding") != tc.coding || varies(res) != tc.vary {
				t.Errorf("%s: %s %d Content-Encoding %q Vary %q, want 200 %q Vary %v", name, side.who, res.StatusCode,
					res.Header.Get("Content-Encoding"), res.Header.Values("Vary"), tc.coding, tc.vary)
				continue
			}
			if weak := strings.HasPrefix(res.Header.Get("Etag"), `W/"`); weak != (tc.coding != "") {
				t.Errorf("%s: %s ETag %q, weak only when compressed", name, side.who, res.Header.Get("Etag"))
			}
			if tc.file == "" {
				if len(side.body) != 0 || res.Header.Get("Content-Length") != "" {
					t.Errorf("%s: %s HEAD has %d body bytes, Content-Length %q", name, side.who, len(side.body), res.Header.Get("Content-Length"))
				}
				continue
			}
			if got := decodeRef(t, tc.coding, side.body); !bytes.Equal(got, files[tc.file]) {
				t.Errorf("%s: %s decodes to %d bytes, not the file's %d", name, side.who, len(got), len(files[tc.file]))
			}
		}
		if tc.coding != "" && tc.file != "" {
			t.Logf("%s: gatehouse %d bytes, nginx %d bytes", name, len(gb), len(nb))
		}
	}
	// A Range request: gatehouse sends the range of the identity
	// representation; nginx (1.22) drops the range and sends the whole
	// body gzipped, as its gzip filter runs before its range filter.
	ex := exchange{method: "GET", target: "/big.css", hdr: []string{"Accept-Encoding", "gzip", "Range", "bytes=0-99"}}
	gr, gb := mustDo(t, gh, ex)
	if gr.StatusCode != 206 || gr.Header.Get("Content-Encoding") != "" || !bytes.Equal(gb, files["big.css"][:100]) {
		t.Errorf("gatehouse Range: %d %q, %d bytes; want 206 identity of 100", gr.StatusCode, gr.Header.Get("Content-Encoding"), len(gb))
	}
	nr, _ := mustDo(t, nx, ex)
	t.Logf("nginx Range with gzip on: %d Content-Encoding %q", nr.StatusCode, nr.Header.Get("Content-Encoding"))
}
