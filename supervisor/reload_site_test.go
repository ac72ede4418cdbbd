package supervisor

import (
	"reflect"
	"testing"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/supervisor/roots"
)

// A reload that changes header rules or error pages, at a listener, a
// route or the top level, replaces the workers, which read them only from
// Hello; and an error page's own directory is handed to the workers after
// the static roots.
func TestReloadReplacesWorkersForSiteSettings(t *testing.T) {
	parse := func(src string) *config.Config {
		t.Helper()
		cfg, err := config.Parse([]byte(src), "reload.hcl", config.ParseOptions{BaseDir: "/srv", SkipFSChecks: true})
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	const listener = "listener \"http\" {\n  address = \"127.0.0.1:8080\"\n"
	const route = "route \"/\" {\n  static {\n    root = \"www\"\n  }\n"
	base := parse(listener + "}\n" + route + "}\n")
	for _, tc := range []struct {
		name, src string
	}{
		{"listener headers", listener + "  headers {\n    set = { \"X-A\" = \"a\" }\n  }\n}\n" + route + "}\n"},
		{"route headers", listener + "}\n" + route + "  headers {\n    add = { \"X-A\" = \"a\" }\n  }\n}\n"},
		{"top-level error page", listener + "}\n" + route + "}\nerror_page {\n  status = [404]\n  file = \"www/404.html\"\n}\n"},
		{"route error page", listener + "}\n" + route + "  error_page {\n    status = [404]\n    file = \"www/404.html\"\n  }\n}\n"},
		{"route max_body_bytes", listener + "}\n" + route + "  max_body_bytes = 5\n}\n"},
	} {
		if !workersNeedReplacing(base, parse(tc.src)) {
			t.Errorf("%s: workersNeedReplacing = false, want true", tc.name)
		}
	}
	if workersNeedReplacing(base, parse(listener+"}\n"+route+"}\n")) {
		t.Error("unchanged: workersNeedReplacing = true, want false")
	}
	cfg := parse(listener + "}\n" + route + "}\nerror_page {\n  status = [404]\n  file = \"www/404.html\"\n}\nerror_page {\n  status = [502]\n  file = \"errors/50x.html\"\n}\n")
	if got, want := roots.Paths(cfg), []string{"/srv/www", "/srv/errors"}; !reflect.DeepEqual(got, want) {
		t.Errorf("roots.Paths = %q, want %q", got, want)
	}
}
