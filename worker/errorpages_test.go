package worker

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestRoundErrorPages: the configured page replaces gatehouse's own text
// (a static 404, a bodiless respond, no route, the transport's 413) with
// the status kept and the page's type; a route's page wins for its
// status; respond's own body is the operator's and stays.
func TestRoundErrorPages(t *testing.T) {
	dir := t.TempDir()
	www, own := filepath.Join(dir, "www"), filepath.Join(dir, "own")
	files := map[string]string{
		"www/index.html":      "home\n",
		"www/errors/404.html": "<h1>custom 404</h1>\n",
		"www/errors/413.txt":  "too large, sorry\n",
		"own/404.html":        "<h1>the route's own 404</h1>\n",
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	roots := map[string]*os.Root{}
	for _, d := range []string{www, own} {
		r, err := os.OpenRoot(d)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		roots[d] = r
	}
	src := fmt.Sprintf(`
listener "http" {
  address = "127.0.0.1:0"
}
limits {
  max_body_bytes = 16
}
log {
  access_log = false
}
error_page {
  status = [404]
  file   = %[1]q
}
error_page {
  status = [413]
  file   = %[2]q
}
route "/site/" {
  static {
    root = %[3]q
  }
}
route "/gone" {
  respond {
    status = 404
  }
}
route "/mine" {
  respond {
    status = 404
    body   = "mine\n"
  }
}
route "/own/" {
  error_page {
    status = [404]
    file   = %[4]q
  }
  respond {
    status = 404
  }
}
`, filepath.Join(www, "errors/404.html"), filepath.Join(www, "errors/413.txt"), www, filepath.Join(own, "404.html"))
	h := startWorkerWith(t, src, roots)
	html := "text/html; charset=utf-8"
	for _, tc := range []struct {
		name, req string
		status    int
		ctype     string
		body      string
	}{
		{"static 404", get("/site/missing"), 404, html, files["www/errors/404.html"]},
		{"static 200", get("/site/index.html"), 200, html, "home\n"},
		{"respond without body", get("/gone"), 404, html, files["www/errors/404.html"]},
		{"respond's own body", get("/mine"), 404, "text/plain; charset=utf-8", "mine\n"},
		{"no route", get("/nowhere"), 404, html, files["www/errors/404.html"]},
		{"route's own page", get("/own/x"), 404, html, files["own/404.html"]},
		{"transport's 413", "POST /gone HTTP/1.1\r\nHost: x\r\nContent-Length: 17\r\n\r\n", 413, "text/plain; charset=utf-8", files["www/errors/413.txt"]},
		{"HEAD", "HEAD /nowhere HTTP/1.1\r\nHost: x\r\n\r\n", 404, html, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := h.connect()
			cl.write(t, tc.req)
			waitReadable(t, cl.fd)
			h.dispatch(cl, nil)
			cl.c.SetReadDeadline(time.Now().Add(roundWait))
			method := "GET"
			if tc.req[:4] == "HEAD" {
				method = "HEAD"
			}
			r, err := http.ReadResponse(cl.br, &http.Request{Method: method})
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(r.Body)
			if r.StatusCode != tc.status || r.Header.Get("Content-Type") != tc.ctype || string(body) != tc.body {
				t.Errorf("got %d %q %q, want %d %q %q", r.StatusCode, r.Header.Get("Content-Type"), body, tc.status, tc.ctype, tc.body)
			}
			if method == "HEAD" && r.Header.Get("Content-Length") != strconv.Itoa(len(files["www/errors/404.html"])) {
				t.Errorf("HEAD: Content-Length %q, want the page's length", r.Header.Get("Content-Length"))
			}
		})
	}
}
