package e2e

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// The static handler against nginx itself, for the behaviours where Go's
// FileServer is not the model (issue 10 item 8): types never sniffed,
// precompressed siblings, the directory redirect, a directory without index,
// Range units, 416 and the range cap, and what odd names get. Where gatehouse
// deliberately differs from nginx it is not compared here: gatehouse merges
// overlapping and nearby ranges (nginx sends each), refuses symlinks that
// leave the root (nginx follows them unless disable_symlinks is set), and
// answers invalid UTF-8 in a path with 400.

// startNginx runs nginx in the foreground (one process, no privilege
// change) serving www with settings equivalent to gatehouse's defaults, and
// returns its address. It skips the test when nginx is not installed.
func startNginx(t *testing.T, www string) string {
	t.Helper()
	addr, _ := startNginxWith(t, www, "")
	return addr
}

// startNginxWith is startNginx with more directives in its http block; it
// returns nginx's process id too.
func startNginxWith(t testing.TB, www, extra string) (string, int) {
	t.Helper()
	return startNginxConf(t, `
  default_type application/octet-stream;
  types {
    text/html html;
    text/css css;
    font/woff2 woff2;
  }
  charset utf-8;
  charset_types text/html text/css;
  gzip_static on;
  gzip_vary on;
  max_ranges 16;
`+extra, fmt.Sprintf(`
    root %s;
    index index.html;
    autoindex off;
`, www))
}

// startNginxConf runs nginx in the foreground on a free loopback port, with
// http (directives of its http block) and server (the body of its one
// server block, without listen), and returns its address and process id.
// It skips the test when nginx is not installed.
func startNginxConf(t testing.TB, http, server string) (string, int) {
	t.Helper()
	bin, err := exec.LookPath("nginx")
	if err != nil {
		if _, err := os.Stat("/usr/sbin/nginx"); err != nil {
			t.Skip("nginx is not installed")
		}
		bin = "/usr/sbin/nginx"
	}
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	conf := fmt.Sprintf(`
daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log;
events { worker_connections 64; }
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
%[3]s
  server {
    listen %[2]s;
%[4]s
  }
}
`, dir, addr, http, server)
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-e", filepath.Join(dir, "error.log"), "-c", path)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return addr, cmd.Process.Pid
		}
		if i == 100 {
			log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Fatalf("nginx did not listen on %s: %v\n%s\n%s", addr, err, out.String(), log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestStaticAgainstNginx(t *testing.T) {
	dir := workerReadableTempDir(t)
	www := filepath.Join(dir, "www")
	writeTree(t, www, map[string]string{
		"index.html":            "<h1>home</h1>\n",
		"upload":                "<html><script>alert(1)</script></html>",
		"upload.unknown":        "<html><script>alert(1)</script></html>",
		"css/site.css":          "body { margin: 0 }\n",
		"css/site.css.gz":       "pretend gzip",
		"font.woff2":            "wOF2",
		"no index/a.txt":        "a",
		"with index/index.html": "<p>i</p>\n",
		"range.txt":             string(bytes.Repeat([]byte("0123456789"), 500)),
	})
	ng := startNginx(t, www)
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
}
`, www))
	gh := &rawClient{tb: t, src: "127.0.0.1", dst: h.addr}
	defer gh.close()
	nx := &rawClient{tb: t, src: "127.0.0.1", dst: ng}
	defer nx.close()

	many := "bytes=0-0"
	for i := 1; i <= 20; i++ {
		many += fmt.Sprintf(",%d-%d", i*200, i*200)
	}
	tests := []struct {
		target string
		hdr    []string
		// headers compared besides the status and the body
		same []string
		// want is the status both must answer
		want int
		// multipart: the bodies differ by their boundaries only
		multipart bool
	}{
		{target: "/upload", same: []string{"Content-Type"}, want: 200},
		{target: "/upload.unknown", same: []string{"Content-Type"}, want: 200},
		{target: "/font.woff2", same: []string{"Content-Type"}, want: 200},
		{target: "/css/site.css", hdr: []string{"Accept-Encoding", "gzip"}, same: []string{"Content-Type", "Content-Encoding", "Vary", "Content-Length"}, want: 200},
		{target: "/css/site.css", same: []string{"Content-Type", "Content-Encoding", "Content-Length"}, want: 200},
		{target: "/css", want: 301},
		{target: "/with%20index", want: 301},
		{target: "/no%20index", want: 301},
		{target: "/with%20index/", same: []string{"Content-Type"}, want: 200},
		{target: "/no%20index/", want: 403},
		{target: "/range.txt/", want: 404},
		{target: "/missing/deep/path", want: 404},
		{target: "/range.txt", hdr: []string{"Range", "lines=0-5"}, same: []string{"Content-Length"}, want: 200},
		{target: "/range.txt", hdr: []string{"Range", "bytes=0-9"}, same: []string{"Content-Range", "Content-Length"}, want: 206},
		{target: "/range.txt", hdr: []string{"Range", "bytes=-10"}, same: []string{"Content-Range", "Content-Length"}, want: 206},
		{target: "/range.txt", hdr: []string{"Range", "bytes=5000-"}, same: []string{"Content-Range"}, want: 416},
		{target: "/range.txt", hdr: []string{"Range", "bytes=9-1"}, same: []string{"Content-Range"}, want: 416},
		{target: "/range.txt", hdr: []string{"Range", "bytes=x-1"}, same: []string{"Content-Range"}, want: 416},
		{target: "/range.txt", hdr: []string{"Range", many}, same: []string{"Content-Length"}, want: 200},
		{target: "/range.txt", hdr: []string{"Range", "bytes=0-0,4000-4000"}, want: 206, multipart: true},
		{target: "/a%00b", want: 400},
	}
	for _, tt := range tests {
		ex := exchange{method: "GET", target: tt.target, hdr: tt.hdr}
		gr, gb, err := gh.do(ex)
		if err != nil {
			t.Fatalf("gatehouse %s: %v", tt.target, err)
		}
		nr, nb, err := nx.do(ex)
		if err != nil {
			t.Fatalf("nginx %s: %v", tt.target, err)
		}
		name := fmt.Sprintf("GET %s %v", tt.target, tt.hdr)
		if gr.StatusCode != tt.want || nr.StatusCode != tt.want {
			t.Errorf("%s: gatehouse %d, nginx %d, want %d\n%v %.300q\n%v %.300q", name, gr.StatusCode, nr.StatusCode, tt.want, gr.Header, gb, nr.Header, nb)
			continue
		}
		if tt.want < 300 && !tt.multipart && !bytes.Equal(gb, nb) {
			t.Errorf("%s: bodies differ: gatehouse %.80q, nginx %.80q", name, gb, nb)
		}
		for _, k := range tt.same {
			if g, n := gr.Header.Get(k), nr.Header.Get(k); g != n {
				t.Errorf("%s: %s gatehouse %q, nginx %q", name, k, g, n)
			}
		}
	}
}
