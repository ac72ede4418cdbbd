package e2e

import (
	"fmt"
	"path/filepath"
	"testing"
)

// TestCompressOverTLS: a compressing route behind a TLS listener (the
// response leaves through the worker's TLS state, not sendfile) answers
// each coding, decoding to the file.
func TestCompressOverTLS(t *testing.T) {
	needDecoders(t)
	dir := workerReadableTempDir(t)
	www := filepath.Join(dir, "z")
	files := compressTree(t, www)
	s := startTLS(t, fmt.Sprintf(`
route "/z/" {
  static {
    root = %q
  }
  compress {}
}
`, www))
	cl := &rawClient{tb: t, src: "127.0.0.1", dst: s.tlsAddr, sni: "default.test"}
	defer cl.close()
	for _, coding := range []string{"gzip", "zstd", "br"} {
		for _, name := range []string{"page.html", "big.txt"} {
			res, body := mustDo(t, cl, exchange{method: "GET", target: "/z/" + name, hdr: []string{"Accept-Encoding", coding}})
			checkCompressed(t, "GET /z/"+name+" over TLS", res, body, coding, files[name])
		}
	}
	res, body := mustDo(t, cl, exchange{method: "GET", target: "/z/big.txt", hdr: []string{"Accept-Encoding", "gzip", "Range", "bytes=0-9"}})
	if res.StatusCode != 206 || res.Header.Get("Content-Encoding") != "" || string(body) != string(files["big.txt"][:10]) {
		t.Errorf("Range over TLS: %d %q %q", res.StatusCode, res.Header.Get("Content-Encoding"), body)
	}
	checkSandboxed(t, s.harness)
}
