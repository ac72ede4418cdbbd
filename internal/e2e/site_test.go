package e2e

import (
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The day-one site settings (issue 30: header rules, error pages, a route's
// max_body_bytes) side by side with nginx configured the same way, under
// the strict sandbox with real worker processes.

// startNginxSite runs nginx with server as the body of its one server
// block, HTML and text types known, and returns its address.
func startNginxSite(t *testing.T, server string) string {
	t.Helper()
	addr, _ := startNginxConf(t, `
  default_type application/octet-stream;
  types {
    text/html html;
    text/plain txt;
  }
`, server)
	return addr
}

// startSiteUpstream is the app behind both: it names itself in Server and
// X-Powered-By, sends Cache-Control: private, reports the request fields
// it received as X-Got-* fields, and answers /app/status/NNN with status
// NNN and the body "upstream NNN".
func startSiteUpstream(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		h := rw.Header()
		h.Set("Server", "app/1.0")
		h.Set("X-Powered-By", "app")
		h.Set("Cache-Control", "private")
		h.Set("X-Got-Env", r.Header.Get("X-Env"))
		h.Set("X-Got-Cookie", r.Header.Get("Cookie"))
		h.Set("X-Got-Host", r.Host)
		h.Set("Content-Type", "text/plain")
		status := 200
		if s, ok := strings.CutPrefix(r.URL.Path, "/app/status/"); ok {
			status, _ = strconv.Atoi(s)
		}
		rw.WriteHeader(status)
		fmt.Fprintf(rw, "upstream %d\n", status)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}

// sideBySide sends each exchange to gatehouse and nginx and compares the
// status (want) and the named fields (the value "" for an absent one).
type sideCase struct {
	ex     exchange
	want   int
	fields map[string]string // field: the value both must send
	body   string            // non-empty: the body both must send
	// mediaType, non-empty: the Content-Type both must send, parameters
	// aside (nginx adds a charset only where told to).
	mediaType string
}

func sideBySide(t *testing.T, gatehouse, nginx string, cases []sideCase) {
	t.Helper()
	for _, tc := range cases {
		for _, peer := range []struct{ name, addr string }{{"gatehouse", gatehouse}, {"nginx", nginx}} {
			rc := &rawClient{tb: t, src: "127.0.0.1", dst: peer.addr}
			r, body, err := rc.do(tc.ex)
			rc.close()
			name := fmt.Sprintf("%s %s %s", peer.name, tc.ex.method, tc.ex.target)
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			if r.StatusCode != tc.want {
				t.Errorf("%s: status %d, want %d\n%v\n%.200q", name, r.StatusCode, tc.want, r.Header, body)
			}
			for k, v := range tc.fields {
				if got := strings.Join(r.Header.Values(k), ", "); got != v {
					t.Errorf("%s: %s %q, want %q", name, k, got, v)
				}
			}
			if mt, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";"); tc.mediaType != "" && mt != tc.mediaType {
				t.Errorf("%s: Content-Type %q, want %s", name, r.Header.Get("Content-Type"), tc.mediaType)
			}
			if tc.body != "" && string(body) != tc.body {
				t.Errorf("%s: body %.200q, want %.200q", name, body, tc.body)
			}
		}
	}
}

// TestHeaderRulesAgainstNginx: response fields set, added (always or not)
// and removed, on static and proxied responses and gatehouse's own 404;
// request fields set and removed toward the upstream; an upstream field
// hidden. nginx is configured with the directives each rule replaces.
func TestHeaderRulesAgainstNginx(t *testing.T) {
	dir := workerReadableTempDir(t)
	www := filepath.Join(dir, "www")
	writeTree(t, www, map[string]string{"index.html": "<h1>home</h1>\n"})
	app := startSiteUpstream(t)
	ng := startNginxSite(t, fmt.Sprintf(`
    location / {
      root %[1]s;
      add_header X-Frame-Options DENY;
      add_header Referrer-Policy no-referrer always;
    }
    location /app/ {
      proxy_pass http://%[2]s;
      proxy_http_version 1.1;
      proxy_set_header Host $host;
      proxy_set_header X-Env prod;
      proxy_set_header Cookie "";
      proxy_hide_header X-Powered-By;
      proxy_hide_header Cache-Control;
      add_header Cache-Control no-store;
      add_header X-Frame-Options DENY;
      add_header Referrer-Policy no-referrer always;
    }
`, www, app))
	h := start(t, fmt.Sprintf(`
log {
  access_log = false
}
upstream "app" {
  addresses = [%[2]q]
}
route "/" {
  headers {
    add = { "X-Frame-Options" = "DENY" }
  }
  headers {
    add    = { "Referrer-Policy" = "no-referrer" }
    always = true
  }
  static {
    root = %[1]q
  }
}
route "/app/" {
  headers {
    set = { "Cache-Control" = "no-store" }
    add = { "X-Frame-Options" = "DENY" }
  }
  headers {
    add    = { "Referrer-Policy" = "no-referrer" }
    always = true
  }
  request_headers {
    set    = { "X-Env" = "prod" }
    remove = ["Cookie"]
  }
  hide_upstream_headers = ["X-Powered-By"]
  proxy {
    upstream = "app"
  }
}
`, www, app))
	cookie := []string{"Cookie", "session=secret"}
	sideBySide(t, h.addr, ng, []sideCase{
		{ex: exchange{method: "GET", target: "/"}, want: 200,
			fields: map[string]string{"X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer"}},
		{ex: exchange{method: "GET", target: "/missing"}, want: 404,
			fields: map[string]string{"X-Frame-Options": "", "Referrer-Policy": "no-referrer"}},
		{ex: exchange{method: "GET", target: "/app/x", hdr: cookie}, want: 200, body: "upstream 200\n",
			fields: map[string]string{"Cache-Control": "no-store", "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer",
				"X-Powered-By": "", "X-Got-Env": "prod", "X-Got-Cookie": "", "X-Got-Host": "test"}},
		// Not compared: Cache-Control, which a set without always leaves
		// as the upstream sent it on a 404, where nginx's stand-in
		// (proxy_hide_header plus add_header) removes it on every status.
		{ex: exchange{method: "GET", target: "/app/status/404", hdr: cookie}, want: 404, body: "upstream 404\n",
			fields: map[string]string{"X-Frame-Options": "", "Referrer-Policy": "no-referrer", "X-Powered-By": "", "X-Got-Env": "prod"}},
		{ex: exchange{method: "GET", target: "/app/status/204"}, want: 204,
			fields: map[string]string{"Cache-Control": "no-store", "X-Frame-Options": "DENY"}},
	})
}

// TestErrorPagesAgainstNginx: error pages for gatehouse's own errors (a
// static 404, the proxy's 502 for an upstream that is down, the 413 of a
// route's max_body_bytes) and, where asked, an upstream's (nginx
// proxy_intercept_errors), each with its status kept and its file's type;
// a page read from a directory of its own, handed to the sandboxed workers
// beside the static root.
func TestErrorPagesAgainstNginx(t *testing.T) {
	dir := workerReadableTempDir(t)
	www, errs := filepath.Join(dir, "www"), filepath.Join(dir, "errors")
	page404, page413, page50x := "<h1>not here</h1>\n", "<h1>too large</h1>\n", "<h1>try again soon</h1>\n"
	writeTree(t, www, map[string]string{"index.html": "<h1>home</h1>\n", "errors/404.html": page404, "errors/413.html": page413})
	writeTree(t, errs, map[string]string{"50x.html": page50x})
	app, down := startSiteUpstream(t), closedPort(t)
	ng := startNginxSite(t, fmt.Sprintf(`
    error_page 404 /errors/404.html;
    location / {
      root %[1]s;
    }
    location /app/ {
      client_max_body_size 64;
      proxy_pass http://%[3]s;
      proxy_intercept_errors on;
      error_page 502 503 /50x.html;
      error_page 413 /errors/413.html;
    }
    location /down/ {
      proxy_pass http://%[4]s;
      error_page 502 /50x.html;
    }
    location = /50x.html {
      root %[2]s;
      internal;
    }
`, www, errs, app, down))
	h := start(t, fmt.Sprintf(`
log {
  access_log = false
}
upstream "app" {
  addresses = [%[3]q]
}
upstream "down" {
  addresses = [%[4]q]
}
error_page {
  status = [404]
  file   = %[5]q
}
error_page {
  status = [413]
  file   = %[6]q
}
route "/" {
  static {
    root = %[1]q
  }
}
route "/app/" {
  max_body_bytes = 64
  error_page {
    status          = [502, 503]
    file            = %[2]q
    upstream_errors = true
  }
  proxy {
    upstream = "app"
  }
}
route "/down/" {
  error_page {
    status = [502]
    file   = %[2]q
  }
  proxy {
    upstream = "down"
  }
}
`, www, filepath.Join(errs, "50x.html"), app, down, filepath.Join(www, "errors/404.html"), filepath.Join(www, "errors/413.html")))
	post := func(n int) exchange {
		return exchange{method: "POST", target: "/app/echo", hdr: []string{"Content-Type", "text/plain"}, body: strings.Repeat("b", n)}
	}
	sideBySide(t, h.addr, ng, []sideCase{
		{ex: exchange{method: "GET", target: "/"}, want: 200, body: "<h1>home</h1>\n"},
		{ex: exchange{method: "GET", target: "/missing"}, want: 404, body: page404, mediaType: "text/html"},
		{ex: exchange{method: "GET", target: "/app/status/503"}, want: 503, body: page50x, mediaType: "text/html",
			fields: map[string]string{"X-Got-Host": "", "X-Powered-By": ""}}, // the upstream's fields dropped
		{ex: exchange{method: "GET", target: "/app/status/502"}, want: 502, body: page50x, mediaType: "text/html"},
		{ex: exchange{method: "GET", target: "/app/status/500"}, want: 500, body: "upstream 500\n", mediaType: "text/plain"},
		{ex: exchange{method: "GET", target: "/app/status/404"}, want: 404, body: "upstream 404\n", mediaType: "text/plain"},
		{ex: exchange{method: "GET", target: "/down/x"}, want: 502, body: page50x, mediaType: "text/html"},
		{ex: post(64), want: 200, body: "upstream 200\n"},
		{ex: post(65), want: 413, body: page413, mediaType: "text/html"},
	})
}
