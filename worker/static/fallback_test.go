package static

import (
	"net/http"
	"testing"
)

// With a fallback, a path that names no file gets the fallback file and
// 200 (try_files); files, directories and other errors are unchanged.
func TestFallback(t *testing.T) {
	cfg := defaultCfg()
	cfg.Fallback = "index.html"
	h, _ := tree(t, "/app/", cfg, map[string]string{
		"index.html":    "<app>",
		"assets/a.js":   "js",
		"docs/":         "",
		"docs/x/":       "",
		"private/":      "",
		"docs/x/y.html": "y",
	})
	for _, tc := range []struct {
		target string
		status int
		body   string
	}{
		{"/app/", 200, "<app>"},
		{"/app/assets/a.js", 200, "js"},
		{"/app/users/42", 200, "<app>"},
		{"/app/assets/missing.js", 200, "<app>"},
		{"/app/assets/a.js/", 200, "<app>"}, // a file named as a directory
		{"/app/docs", 301, ""},
		{"/app/docs/x/y.html", 200, "y"},
		{"/app/docs/", 403, ""}, // a directory without index stays 403
	} {
		w := do(h, http.MethodGet, tc.target)
		wantStatus(t, w, tc.target, tc.status)
		if tc.body != "" && w.Body.String() != tc.body {
			t.Errorf("%s: body %q, want %q", tc.target, w.Body.String(), tc.body)
		}
	}
	if ct := do(h, http.MethodGet, "/app/deep/link").Header().Get("Content-Type"); ct != "text/html; charset=utf-8" {
		t.Errorf("fallback Content-Type %q, want the fallback file's", ct)
	}

	// A fallback that does not exist leaves 404.
	cfg.Fallback = "missing.html"
	h, _ = tree(t, "/", cfg, map[string]string{"a.txt": "a"})
	wantStatus(t, do(h, http.MethodGet, "/nothing"), "/nothing", 404)
	wantStatus(t, do(h, http.MethodGet, "/a.txt"), "/a.txt", 200)
}
