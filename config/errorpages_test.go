package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestErrorPages(t *testing.T) {
	src := minimal + `error_page {
  status = [404, 410]
  file   = "www/errors/404.html"
}
error_page {
  status          = [502, 503, 504]
  file            = "/srv/errors/50x.html"
  upstream_errors = true
}
route "/site/" {
  static {
    root = "www"
  }
}
route "/app/" {
  error_page {
    status = [404]
    file   = "app/404.html"
  }
  respond {}
}
`
	cfg := mustParse(t, src)
	want := []ErrorPage{
		{Statuses: []int{404, 410}, File: "/base/www/errors/404.html", Root: "/base/www"},
		{Statuses: []int{502, 503, 504}, File: "/srv/errors/50x.html", Root: "/srv/errors", UpstreamErrors: true},
	}
	if !reflect.DeepEqual(cfg.ErrorPages, want) {
		t.Errorf("ErrorPages = %+v, want %+v", cfg.ErrorPages, want)
	}
	if got := cfg.ErrorPages[0].Name(); got != "errors/404.html" {
		t.Errorf("Name() = %q, want errors/404.html (under the static root)", got)
	}
	wantRoute := []ErrorPage{{Statuses: []int{404}, File: "/base/app/404.html", Root: "/base/app"}}
	if got := cfg.Routes[2].ErrorPages; !reflect.DeepEqual(got, wantRoute) {
		t.Errorf("route ErrorPages = %+v, want %+v", got, wantRoute)
	}
	// The static root is handed over already; the others are added.
	if got, want := cfg.ErrorPageRoots(), []string{"/srv/errors", "/base/app"}; !reflect.DeepEqual(got, want) {
		t.Errorf("ErrorPageRoots = %q, want %q", got, want)
	}
}

func TestErrorPageErrors(t *testing.T) {
	page := func(body string) string { return minimal + "error_page {\n" + body + "}\n" }
	tests := []struct{ src, err string }{
		{page("  status = [200]\n  file = \"a.html\"\n"), `file.hcl:9,13-16: Invalid value; error_page.status entries are error statuses, 400..599, got 200.`},
		{page("  status = [404.5]\n  file = \"a.html\"\n"), `file.hcl:9,13-18: Invalid value; error_page.status entries are error statuses, 400..599, got 404.5.`},
		{page("  status = [\"404\"]\n  file = \"a.html\"\n"), `file.hcl:9,13-18: Invalid value; error_page.status entries are error statuses, 400..599, got string.`},
		{page("  status = 404\n  file = \"a.html\"\n"), `file.hcl:9,12-15: Invalid value; error_page.status must be a list of statuses such as [404, 410].`},
		{page("  status = []\n  file = \"a.html\"\n"), `file.hcl:9,12-14: Invalid value; error_page.status lists no status.`},
		{page("  status = [404, 404]\n  file = \"a.html\"\n"), `file.hcl:9,18-21: Duplicate error page; error_page: status 404 already has a page at file.hcl:9,13-16.`},
		{page("  status = [404]\n  file = \"a.html\"\n") + "error_page {\n  status = [500, 404]\n  file = \"b.html\"\n}\n", `file.hcl:13,18-21: Duplicate error page`},
		{page("  status = [404]\n  file = \"\"\n"), `file.hcl:10,10-12: Invalid value; error_page.file must be the path of a file, got "".`},
		{page("  status = [404]\n  file = \"errors/\"\n"), `file.hcl:10,10-19: Invalid value; error_page.file must be the path of a file`},
		{page("  status = [404]\n"), `Missing required argument; The argument "file" is required`},
		{page("  file = \"a.html\"\n"), `Missing required argument; The argument "status" is required`},
		{page("  status = [404]\n  file = \"a.html\"\n  upstream_errors = 1\n"), `file.hcl:11,21-22: Incorrect attribute value type; error_page.upstream_errors must be true or false`},
		{minimal + "route \"/x\" {\n  error_page {\n    status = [600]\n    file = \"a.html\"\n  }\n  respond {}\n}\n", `file.hcl:10,15-18: Invalid value; route "/x": error_page.status entries are error statuses`},
	}
	for _, tt := range tests {
		_, err := parse(t, tt.src)
		wantError(t, tt.src, err, tt.err)
	}
}

// TestErrorPageHostChecks: the file must exist, be a regular file of at
// most MaxErrorPageBytes, readable by the workers, and a directory of its
// own must be one the workers can list.
func TestErrorPageHostChecks(t *testing.T) {
	base := readableTempDir(t)
	write := func(name string, size int, mode os.FileMode) {
		p := filepath.Join(base, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(strings.Repeat("x", size)), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	write("www/index.html", 1, 0o644)
	write("www/404.html", 10, 0o644)
	write("errors/50x.html", 10, 0o644)
	write("errors/big.html", MaxErrorPageBytes+1, 0o644)
	write("errors/secret.html", 10, 0o600)
	if err := os.Mkdir(filepath.Join(base, "errors/dir.html"), 0o755); err != nil {
		t.Fatal(err)
	}
	write("closed/404.html", 10, 0o644)
	if err := os.Chmod(filepath.Join(base, "closed"), 0o700); err != nil {
		t.Fatal(err)
	}
	static := "route \"/s/\" {\n  static {\n    root = \"www\"\n  }\n}\n"
	page := func(file string) string {
		return minimal + static + "error_page {\n  status = [404]\n  file = \"" + file + "\"\n}\n"
	}
	for _, tt := range []struct{ file, err string }{
		{"www/404.html", ""},
		{"errors/50x.html", ""},
		{"errors/missing.html", `file.hcl:15,10-31: Invalid error page; error_page.file "` + base + `/errors/missing.html": no such file or directory.`},
		{"errors/big.html", `file.hcl:15,10-27: Invalid error page; error_page.file "` + base + `/errors/big.html" is 1048577 bytes, over the 1048576`},
		{"errors/dir.html", `is not a regular file.`},
		{"errors/secret.html", `file.hcl:15,10-30: Unreadable error page; error_page.file "` + base + `/errors/secret.html" cannot be read by the workers' account`},
		{"closed/404.html", `file.hcl:15,10-27: Unreadable static root; error_page.file directory "` + base + `/closed" cannot be opened by the workers' account`},
	} {
		src := page(tt.file)
		err := hostParse(base, src)
		if tt.err == "" {
			if err != nil {
				t.Errorf("%s: %v", tt.file, err)
			}
			continue
		}
		wantError(t, src, err, tt.err)
	}
}
