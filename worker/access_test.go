package worker

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/crypto/bcrypt"
)

// testWorker is a worker for cfg's routes without a channel.
func testWorker(t *testing.T, src string) *Worker {
	t.Helper()
	cfg, err := config.Parse([]byte(src), "t.hcl", config.ParseOptions{BaseDir: "/", SkipFSChecks: true})
	if err != nil {
		t.Fatal(err)
	}
	w := &Worker{log: hclog.NewNullLogger(), setup: &setup{cfg: cfg}}
	if w.router, err = newRouter(w, cfg, nil); err != nil {
		t.Fatal(err)
	}
	return w
}

const accessListener = `listener "http" {
  address = "127.0.0.1:8080"
}
trusted_proxies = ["10.0.0.0/8"]
`

// admitted runs the admission of a request from peer to path and returns
// the recorder and whether the handler may run.
func admitted(w *Worker, peer, path string, hdr ...string) (*httptest.ResponseRecorder, bool) {
	r := httptest.NewRequest("GET", path, nil)
	r.RemoteAddr = peer
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	cs := &connServer{w: w}
	ref := cs.admit(context.Background(), r, w.router.match(r.Host, r.URL.Path))
	if ref.refused() {
		rec.Header().Set(ref.field, ref.value)
		http.Error(rec, ref.text, ref.status)
	}
	return rec, !ref.refused()
}

func TestAdmitAccess(t *testing.T) {
	w := testWorker(t, accessListener+`route "/" {
  respond {}
}
route "/admin/" {
  access = ["deny 127.0.0.3", "allow 127.0.0.0/24", "allow 198.51.100.7", "deny all"]
  respond {}
}
route "/open/" {
  access = ["deny 127.0.0.2", "allow all"]
  respond {}
}
`)
	for _, tc := range []struct {
		peer, path, xff string
		want            bool
	}{
		{"127.0.0.2:1", "/admin/x", "", true},
		{"127.0.0.3:1", "/admin/x", "", false},
		{"127.0.1.1:1", "/admin/x", "", false},
		{"[::1]:1", "/admin/x", "", false},
		{"192.0.2.9:1", "/", "", true},
		{"127.0.0.2:1", "/open/", "", false},
		{"127.0.0.3:1", "/open/", "", true},
		// Behind a trusted proxy, the client it names decides.
		{"10.1.1.1:1", "/admin/", "198.51.100.7", true},
		{"10.1.1.1:1", "/admin/", "198.51.100.8", false},
		// An untrusted peer cannot name one.
		{"192.0.2.9:1", "/admin/", "127.0.0.2", false},
	} {
		var hdr []string
		if tc.xff != "" {
			hdr = []string{"X-Forwarded-For", tc.xff}
		}
		rec, ok := admitted(w, tc.peer, tc.path, hdr...)
		if ok != tc.want || (!ok && rec.Code != http.StatusForbidden) {
			t.Errorf("%s from %s (X-Forwarded-For %q): admitted %v status %d, want %v", tc.path, tc.peer, tc.xff, ok, rec.Code, tc.want)
		}
	}
}

func TestAdmitBasicAuth(t *testing.T) {
	w := testWorker(t, accessListener+`route "/" {
  respond {}
}
route "/private/" {
  basic_auth {
    htpasswd = "/etc/users"
    realm = "staff only"
  }
  respond {}
}
`)
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret:x"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	w.cfg.SetHtpasswd(map[string][]config.HtpasswdUser{"/etc/users": {{Name: "alice", Hash: string(hash)}}})
	if w.router, err = newRouter(w, w.cfg, nil); err != nil {
		t.Fatal(err)
	}
	basic := func(user, pass string) string {
		r := &http.Request{Header: http.Header{}}
		r.SetBasicAuth(user, pass)
		return r.Header.Get("Authorization")
	}
	for _, tc := range []struct {
		auth string
		want bool
	}{
		{"", false},
		{basic("alice", "s3cret:x"), true},
		{basic("alice", "s3cret:x"), true}, // from the verified table
		{basic("alice", "s3cret"), false},
		{basic("bob", "s3cret:x"), false},
		{"Bearer abc", false},
		{"Basic !!!", false},
	} {
		var hdr []string
		if tc.auth != "" {
			hdr = []string{"Authorization", tc.auth}
		}
		rec, ok := admitted(w, "192.0.2.1:1", "/private/x", hdr...)
		if ok != tc.want {
			t.Errorf("Authorization %q: admitted %v, want %v", tc.auth, ok, tc.want)
		}
		if !ok && (rec.Code != http.StatusUnauthorized || rec.Header().Get("Www-Authenticate") != `Basic realm="staff only"`) {
			t.Errorf("Authorization %q: %d, WWW-Authenticate %q", tc.auth, rec.Code, rec.Header().Get("Www-Authenticate"))
		}
	}
	if _, ok := admitted(w, "192.0.2.1:1", "/public"); !ok {
		t.Error("a route without basic_auth asked for credentials")
	}
	if _, ok := admitted(w, "192.0.2.2:1", "/private/x", "Authorization", basic("alice", "s3cret:x")); !ok {
		t.Error("another client was refused")
	}
}

func TestRedirectAndSlash(t *testing.T) {
	w := testWorker(t, accessListener+`route "/" {
  respond {}
}
route "/old/" {
  redirect {
    to = "https://example.com/new{rest}{query}"
    status = 308
  }
}
route "/go" {
  redirect { to = "/elsewhere{path}" }
}
route "/py/" {
  slash_redirect = true
  respond { body = "py" }
}
route "/both/" {
  slash_redirect = true
  respond {}
}
route "/both" {
  respond { body = "exact" }
}
`)
	for _, tc := range []struct {
		target string
		status int
		loc    string
	}{
		{"/old/a/b%20c?x=1&y", 308, "https://example.com/new/a/b%20c?x=1&y"},
		{"/old/", 308, "https://example.com/new/"},
		{"/go/x", 302, "/elsewhere/go/x"},
		{"/py?q=1", 301, "/py/?q=1"},
		{"/py/", 200, ""},
		{"/pyx", 200, ""},
		{"/both", 200, ""}, // the exact route wins over the slash redirect
	} {
		r := httptest.NewRequest("GET", tc.target, nil)
		u, _ := url.Parse(tc.target)
		r.URL = u
		rec := httptest.NewRecorder()
		serve(w.router.match("", u.Path), rec, r)
		if rec.Code != tc.status || rec.Header().Get("Location") != tc.loc {
			t.Errorf("%s: %d Location %q, want %d %q", tc.target, rec.Code, rec.Header().Get("Location"), tc.status, tc.loc)
		}
	}
}

func TestReplacePrefix(t *testing.T) {
	for _, tc := range []struct {
		target, base, with, want string
	}{
		{"/py/x/y", "/py", "/", "/x/y"},
		{"/py/", "/py", "/", "/"},
		{"/py", "/py", "/", "/"},
		{"/py/a%2Fb", "/py", "/", "/a%2Fb"},
		{"/py/x", "/py", "/v2/", "/v2/x"},
		{"/py/", "/py", "/v2/", "/v2/"},
		{"/py", "/py", "/v2/", "/v2/"},
		{"/py/x", "/py", "/v2", "/v2/x"},
	} {
		u, err := url.Parse(tc.target)
		if err != nil {
			t.Fatal(err)
		}
		replacePrefix(u, tc.base, tc.with)
		if got := u.EscapedPath(); got != tc.want {
			t.Errorf("%s (%s → %s): %s, want %s", tc.target, tc.base, tc.with, got, tc.want)
		}
	}
}
