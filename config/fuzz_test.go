package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// FuzzParse checks that Parse never panics, that every failure is an *Error
// whose diagnostics all name the file and a position, and that a success
// has the shape the rest of gatehouse relies on.
func FuzzParse(f *testing.F) {
	f.Add([]byte(minimal))
	f.Add(defaultSource)
	f.Add([]byte("workers {\n  count = 1e400\n}\n"))
	f.Add([]byte("trusted_proxies = [\"10.0.0.0/8\", 1, null]\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		cfg, err := Parse(src, "fuzz.hcl", ParseOptions{BaseDir: "/base", SkipFSChecks: true})
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || len(e.Diagnostics) == 0 {
				t.Fatalf("error %T %v, want a non-empty *Error", err, err)
			}
			for _, d := range e.Diagnostics {
				if d.Subject == nil || d.Subject.Filename != "fuzz.hcl" {
					t.Fatalf("diagnostic without a position in fuzz.hcl: %v", d)
				}
			}
			if !strings.HasPrefix(err.Error(), "fuzz.hcl:") {
				t.Fatalf("error %q does not start with the file name", err)
			}
			return
		}
		if len(cfg.Listeners) == 0 || len(cfg.Routes) == 0 {
			t.Fatalf("parsed with %d listeners and %d routes", len(cfg.Listeners), len(cfg.Routes))
		}
		for _, r := range cfg.Routes {
			handlers := 0
			for _, set := range []bool{r.Static != nil, r.Respond != nil, r.Proxy != nil, r.Metrics != nil, r.Embedded != nil} {
				if set {
					handlers++
				}
			}
			if handlers != 1 || !strings.HasPrefix(r.Prefix, "/") || r.Proxy != nil && r.Proxy.IdleTimeout < time.Second {
				t.Fatalf("bad route %+v", r)
			}
		}
		if cfg.Streams.Max < 1 || cfg.Streams.PerClient < 1 {
			t.Fatalf("bad streams %+v", cfg.Streams)
		}
		if cfg.Workers.Count < 1 || cfg.Workers.Concurrency < 1 || cfg.Workers.Share() < 1 {
			t.Fatalf("bad workers %+v", cfg.Workers)
		}
	})
}
