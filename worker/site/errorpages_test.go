package site

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/hashicorp/go-hclog"
)

// TestInterceptUpstream: an upstream's response is replaced only for a
// page with upstream_errors, keeping its status and only the fields a
// client acts on.
func TestInterceptUpstream(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "50x.html"), []byte("<p>later</p>"), 0o644); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	log := hclog.NewNullLogger()
	pages := NewErrorPages(log, []config.ErrorPage{
		{Statuses: []int{503}, File: filepath.Join(dir, "50x.html"), Root: dir, UpstreamErrors: true},
		{Statuses: []int{502}, File: filepath.Join(dir, "50x.html"), Root: dir},
	}, nil, map[string]*os.Root{dir: root})
	upstream := func(status int) *http.Response {
		return &http.Response{StatusCode: status, Body: io.NopCloser(strings.NewReader("upstream body")),
			Header: http.Header{"Retry-After": {"7"}, "Set-Cookie": {"a=b"}, "Content-Type": {"text/plain"}, "Content-Length": {"13"}}}
	}
	res := upstream(503)
	pages.InterceptUpstream(log, res)
	body, _ := io.ReadAll(res.Body)
	want := http.Header{"Content-Type": {"text/html; charset=utf-8"}, "Content-Length": {"12"}, "Retry-After": {"7"}}
	if string(body) != "<p>later</p>" || !reflect.DeepEqual(res.Header, want) || res.StatusCode != 503 {
		t.Errorf("503 with upstream_errors: %d %v %q, want 503 %v the page", res.StatusCode, res.Header, body, want)
	}
	res = upstream(502)
	pages.InterceptUpstream(log, res)
	if body, _ := io.ReadAll(res.Body); string(body) != "upstream body" || res.Header.Get("Set-Cookie") == "" {
		t.Errorf("502 without upstream_errors was replaced: %v %q", res.Header, body)
	}
}
