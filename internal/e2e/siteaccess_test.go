package e2e

import (
	"bufio"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Access lists, basic auth and redirects (issue 30 items 3-5), each under
// the strict sandbox and against nginx configured the same way.

// startNginxServer runs nginx with server (the body of one server block,
// without listen) and relative redirects, and returns its address.
func startNginxServer(t *testing.T, server string) string {
	t.Helper()
	addr, _ := startNginxConf(t, "  absolute_redirect off;\n", server)
	return addr
}

// bodyDir returns a directory nginx can read holding ok.txt with body.
func bodyDir(t *testing.T, body string) string {
	t.Helper()
	dir := workerReadableTempDir(t)
	if err := os.WriteFile(filepath.Join(dir, "ok.txt"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// answer is what a test compares of a response.
type answer struct {
	status        int
	location      string
	authenticate  string
	body          string
	retryAfterSet bool
}

// ask sends one GET for target from the loopback address src on a new
// connection, with the header fields hdr (name, value pairs).
func ask(t *testing.T, src, addr, target string, hdr ...string) answer {
	t.Helper()
	c := dialFrom(t, src, addr)
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: test\r\nConnection: close\r\n", target)
	for i := 0; i+1 < len(hdr); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", hdr[i], hdr[i+1])
	}
	b.WriteString("\r\n")
	if _, err := c.Write([]byte(b.String())); err != nil {
		t.Fatal(err)
	}
	resp, body, err := readResponse(bufio.NewReader(c), "GET")
	if err != nil {
		t.Fatalf("GET %s from %s: %v", target, src, err)
	}
	return answer{status: resp.StatusCode, location: resp.Header.Get("Location"), authenticate: resp.Header.Get("WWW-Authenticate"),
		body: body, retryAfterSet: resp.Header.Get("Retry-After") != ""}
}

// The same allow and deny lists give the same answers to the same client
// addresses as nginx's allow and deny; the first matching rule decides.
func TestAccessAgainstNginx(t *testing.T) {
	h := start(t, `
route "/" {
  respond { body = "ok" }
}
route "/admin/" {
  access = ["deny 127.0.0.3", "allow 127.0.0.0/29", "allow 127.0.0.20", "deny all"]
  respond { body = "ok" }
}
route "/blocklist/" {
  access = ["deny 127.0.0.2", "deny 127.0.0.16/30", "allow all"]
  respond { body = "ok" }
}
`)
	// try_files, not return: return answers in the rewrite phase, before
	// nginx's access phase could refuse.
	ngx := startNginxServer(t, fmt.Sprintf(`
    root %s;
    location / { try_files /ok.txt =404; }
    location /admin/ { deny 127.0.0.3; allow 127.0.0.0/29; allow 127.0.0.20; deny all; try_files /ok.txt =404; }
    location /blocklist/ { deny 127.0.0.2; deny 127.0.0.16/30; allow all; try_files /ok.txt =404; }
`, bodyDir(t, "ok")))
	compared := 0
	for _, src := range []string{"127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.7", "127.0.0.8", "127.0.0.17", "127.0.0.20"} {
		for _, path := range []string{"/", "/admin/", "/admin/x", "/blocklist/y"} {
			g, n := ask(t, src, h.addr, path), ask(t, src, ngx, path)
			if g.status != n.status {
				t.Errorf("%s from %s: gatehouse %d, nginx %d", path, src, g.status, n.status)
			}
			if g.status != http.StatusOK && g.status != http.StatusForbidden {
				t.Errorf("%s from %s: gatehouse %d", path, src, g.status)
			}
			compared++
		}
	}
	// Spot checks, so that agreement on a wrong answer cannot pass.
	for _, tc := range []struct {
		src, path string
		want      int
	}{{"127.0.0.2", "/admin/", 200}, {"127.0.0.3", "/admin/", 403}, {"127.0.0.8", "/admin/", 403}, {"127.0.0.20", "/admin/", 200}, {"127.0.0.17", "/blocklist/y", 403}, {"127.0.0.8", "/blocklist/y", 200}} {
		if got := ask(t, tc.src, h.addr, tc.path).status; got != tc.want {
			t.Errorf("%s from %s: %d, want %d", tc.path, tc.src, got, tc.want)
		}
	}
	t.Logf("%d answers compared with nginx", compared)
}

// Redirects, the slash redirect and prefix stripping answer as nginx's
// return/rewrite, location auto-redirect and proxy_pass with a URI do.
func TestRedirectsAgainstNginx(t *testing.T) {
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.RequestURI)
	}))
	t.Cleanup(echo.Close)
	up := strings.TrimPrefix(echo.URL, "http://")
	www := workerReadableTempDir(t)
	for name, content := range map[string]string{"index.html": "<spa>", "a.js": "js"} {
		if err := os.WriteFile(filepath.Join(www, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h := start(t, fmt.Sprintf(`
upstream "echo" {
  addresses = ["%[1]s"]
}
route "/" {
  static {
    root = "%[2]s"
    fallback = "/index.html"
  }
}
route "/old/" {
  redirect {
    to = "https://example.com/new{rest}{query}"
    status = 301
  }
}
route "/moved" {
  redirect {
    to = "/elsewhere{path}{query}"
    status = 307
  }
}
route "/py/" {
  slash_redirect = true
  proxy {
    upstream = "echo"
    strip_prefix = true
  }
}
route "/v1/" {
  proxy {
    upstream = "echo"
    rewrite_prefix = "/api/v2/"
  }
}
`, up, www))
	ngx := startNginxServer(t, fmt.Sprintf(`
    location / { root %[2]s; try_files $uri $uri/ /index.html; }
    location /old/ { rewrite ^/old(.*)$ https://example.com/new$1 permanent; }
    location /moved { return 307 /elsewhere$uri$is_args$args; }
    location /py/ { proxy_pass http://%[1]s/; }
    location /v1/ { proxy_pass http://%[1]s/api/v2/; }
`, up, www))
	for _, target := range []string{
		"/old/a/b?x=1&y=2", "/old/", "/old/%C3%A9t%C3%A9",
		"/moved/here?q=1", "/moved",
		"/py", "/py?q=1", "/py/", "/py/x/y?z=1",
		"/v1/users/7?full=1", "/v1/",
		"/", "/a.js", "/deep/link", "/deep/link?tab=2",
	} {
		g, n := ask(t, "127.0.0.1", h.addr, target), ask(t, "127.0.0.1", ngx, target)
		if g.status != n.status || g.location != n.location {
			t.Errorf("%s: gatehouse %d Location %q, nginx %d Location %q", target, g.status, g.location, n.status, n.location)
		}
		if g.status == http.StatusOK && g.body != n.body {
			t.Errorf("%s: gatehouse body %q, nginx %q", target, g.body, n.body)
		}
	}
	for target, want := range map[string]answer{
		"/old/a?x=1":  {status: 301, location: "https://example.com/new/a?x=1"},
		"/py":         {status: 301, location: "/py/"},
		"/py/x?z=1":   {status: 200, body: "/x?z=1"},
		"/v1/u":       {status: 200, body: "/api/v2/u"},
		"/deep/link":  {status: 200, body: "<spa>"},
		"/moved/here": {status: 307, location: "/elsewhere/moved/here"},
	} {
		g := ask(t, "127.0.0.1", h.addr, target)
		if g.status != want.status || g.location != want.location || (want.body != "" && g.body != want.body) {
			t.Errorf("%s: %d Location %q body %q, want %d %q %q", target, g.status, g.location, g.body, want.status, want.location, want.body)
		}
	}
}

// htpasswd runs `htpasswd -B` (apache2-utils) to add user to file.
func htpasswd(t *testing.T, file, user, password string) {
	t.Helper()
	bin, err := exec.LookPath("htpasswd")
	if err != nil {
		t.Skip("htpasswd (apache2-utils) is not installed")
	}
	flags := "-bB"
	if _, err := os.Stat(file); err != nil {
		flags = "-bcB"
	}
	if out, err := exec.Command(bin, flags, file, user, password).CombinedOutput(); err != nil {
		t.Fatalf("htpasswd: %v\n%s", err, out)
	}
}

func basicAuth(user, password string) string {
	r := &http.Request{Header: http.Header{}}
	r.SetBasicAuth(user, password)
	return r.Header.Get("Authorization")
}

// Basic auth from a real `htpasswd -B` file answers as nginx's auth_basic:
// 401 with the realm without or with wrong credentials, 200 with right
// ones. Failures are charged to fail_class: past its burst the client gets
// 429 (another client does not), and a reload picks up a changed file.
func TestBasicAuthAgainstNginx(t *testing.T) {
	dir := workerReadableTempDir(t)
	file := filepath.Join(dir, "users")
	htpasswd(t, file, "alice", "wonder land")
	htpasswd(t, file, "bob", "b:colon")
	// Two workers: the class is the supervisor's and asked before every
	// bcrypt run, so a client over it is refused at either.
	h := start(t, fmt.Sprintf(`
workers {
  count = 2
}
rate_limit "login" {
  prefix = "/login"
  rate = 3
  per = "1h"
  burst = 3
}
route "/" {
  respond { body = "public" }
}
route "/private/" {
  basic_auth {
    htpasswd = "%s"
    realm = "staff"
    fail_class = "login"
  }
  respond { body = "secret" }
}
`, file))
	ngx := startNginxServer(t, fmt.Sprintf(`
    root %s;
    location / { try_files /ok.txt =404; }
    location /private/ { auth_basic "staff"; auth_basic_user_file %s; try_files /ok.txt =404; }
`, bodyDir(t, "secret"), file))
	for _, tc := range []struct {
		auth string
		want int
	}{
		{"", 401},
		{basicAuth("alice", "wonder land"), 200},
		{basicAuth("bob", "b:colon"), 200},
		{basicAuth("alice", "wrong"), 401},
		{basicAuth("carol", "wonder land"), 401},
	} {
		var hdr []string
		if tc.auth != "" {
			hdr = []string{"Authorization", tc.auth}
		}
		// Failures from 127.0.0.4 (two, under the burst of three).
		g, n := ask(t, "127.0.0.4", h.addr, "/private/x", hdr...), ask(t, "127.0.0.4", ngx, "/private/x", hdr...)
		if g.status != tc.want || n.status != tc.want || g.authenticate != n.authenticate {
			t.Errorf("Authorization %q: gatehouse %d %q, nginx %d %q, want %d", tc.auth, g.status, g.authenticate, n.status, n.authenticate, tc.want)
		}
		if tc.want == 401 && g.authenticate != `Basic realm="staff"` {
			t.Errorf("Authorization %q: WWW-Authenticate %q", tc.auth, g.authenticate)
		}
	}
	if g := ask(t, "127.0.0.4", h.addr, "/public"); g.status != 200 {
		t.Errorf("/public: %d", g.status)
	}

	// Guessing from 127.0.0.5: three failures fill the burst, the fourth
	// is refused before any bcrypt run, right credentials included, at
	// whichever worker serves it.
	wrong := basicAuth("alice", "guess")
	var got []int
	for range 4 {
		got = append(got, ask(t, "127.0.0.5", h.addr, "/private/", "Authorization", wrong).status)
	}
	if fmt.Sprint(got) != "[401 401 401 429]" {
		t.Errorf("guesses answered %v, want [401 401 401 429]", got)
	}
	if g := ask(t, "127.0.0.5", h.addr, "/private/", "Authorization", basicAuth("alice", "wonder land")); g.status != 429 || !g.retryAfterSet {
		t.Errorf("throttled client with right credentials: %d (Retry-After set %v), want 429 with Retry-After", g.status, g.retryAfterSet)
	}
	if g := ask(t, "127.0.0.6", h.addr, "/private/", "Authorization", basicAuth("alice", "wonder land")); g.status != 200 {
		t.Errorf("another client: %d, want 200", g.status)
	}

	// A user added to the file logs in after SIGHUP's reload.
	htpasswd(t, file, "dave", "new-pass")
	if g := ask(t, "127.0.0.6", h.addr, "/private/", "Authorization", basicAuth("dave", "new-pass")); g.status != 401 {
		t.Errorf("dave before the reload: %d, want 401", g.status)
	}
	if err := h.sup.Reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Old workers answer 401 until replaced; each try comes from its own
	// address, so that none is throttled meanwhile.
	for i := 10; ; i++ {
		g := ask(t, fmt.Sprintf("127.0.0.%d", i), h.addr, "/private/", "Authorization", basicAuth("dave", "new-pass"))
		if g.status == 200 {
			break
		}
		if i == 200 {
			t.Fatalf("dave after the reload: %d, want 200 within 190 tries", g.status)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
