package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseHostPattern(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: "example.org", want: "example.org"},
		{in: "Example.ORG.", want: "example.org"},
		{in: "*.Example.org", want: "*.example.org"},
		{in: "*.org", want: "*.org"},
		{in: "a-b_c.example", want: "a-b_c.example"},
		{in: "localhost", want: "localhost"},
		{in: "192.0.2.1", want: "192.0.2.1"},
		{in: "[2001:DB8::1]", want: "2001:db8::1"},
		{in: "2001:db8:0::1", want: "2001:db8::1"},
		{in: "", err: "a host name is required"},
		{in: ".", err: "a host name is required"},
		{in: "*", err: "leave hosts out"},
		{in: ".example.org", err: `write both "example.org" and "*.example.org"`},
		{in: "www.*.org", err: "a wildcard is only a whole first label"},
		{in: "*.*.org", err: "a wildcard is only a whole first label"},
		{in: "*example.org", err: "a wildcard is only a whole first label"},
		{in: "*.", err: "leave hosts out"},
		{in: "example.org:8080", err: "has a port"},
		{in: "192.0.2.1:80", err: "has a port"},
		{in: "999.0.2.1", err: "not a valid IP address"},
		{in: "fe80::1%eth0", err: "not a valid IP address"},
		{in: "a..b", err: "1 to 63 bytes"},
		{in: strings.Repeat("a", 64) + ".org", err: "1 to 63 bytes"},
		{in: strings.Repeat("abcdefgh.", 30) + "org", err: "at most 253 bytes"},
		{in: "exa mple.org", err: "letters, digits"},
		{in: "ex/ample.org", err: "letters, digits"},
		{in: "exämple.org", err: "letters, digits"},
		{in: "a@b", err: "letters, digits"},
	} {
		got, err := ParseHostPattern(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseHostPattern(%q) = %q, %v; want an error containing %q", tc.in, got, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("ParseHostPattern(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestRouteHosts(t *testing.T) {
	cfg := mustParse(t, minimal+`
route "/" {
  hosts = ["Example.org", "*.example.org."]
  respond {}
}
route "/api" {
  hosts = ["api.example.org"]
  respond {}
}
route "/api" {
  respond {}
}
`)
	var got [][]string
	for _, r := range cfg.Routes {
		got = append(got, r.Hosts)
	}
	want := [][]string{nil, {"example.org", "*.example.org"}, {"api.example.org"}, nil}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("hosts %q, want %q", got, want)
	}
}

func TestRouteHostsErrors(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want []string
	}{
		{`route "/" {
  hosts = []
  respond {}
}`, []string{"file.hcl:9,11-13", "hosts must list at least one host name"}},
		{`route "/" {
  hosts = "example.org"
  respond {}
}`, []string{"file.hcl:9", "must be a list of strings"}},
		{`route "/" {
  hosts = ["example.org", 1]
  respond {}
}`, []string{"file.hcl:9,27-28", "hosts[1] must be a string"}},
		{`route "/" {
  hosts = ["a.example", "*.exa*mple.org"]
  respond {}
}`, []string{"file.hcl:9,25-41", "Invalid host name", "a wildcard is only a whole first label"}},
		{`route "/" {
  hosts = ["example.org", "EXAMPLE.org."]
  respond {}
}`, []string{"file.hcl:9,27-41", `hosts lists "example.org" twice`}},
		// Duplicate host and prefix, and duplicate host-less prefix.
		{`route "/x" {
  hosts = ["a.example", "*.b.example"]
  respond {}
}
route "/x" {
  hosts = ["c.example", "*.B.example"]
  respond {}
}`, []string{"file.hcl:12,7-11", `Route "/x" for host "*.b.example" is already defined at file.hcl:8`}},
		{`route "/" {
  allow_trace = true
  respond {}
}`, []string{"file.hcl:8,7-10", `Route "/" is already defined at file.hcl:5`}},
	} {
		src := minimal + tc.src
		_, err := parse(t, src)
		wantError(t, src, err, tc.want...)
	}
	// The same prefix for different hosts, or with and without hosts, is
	// no duplicate.
	mustParse(t, minimal+`route "/" {
  hosts = ["a.example"]
  respond {}
}
route "/x" {
  hosts = ["a.example"]
  respond {}
}
route "/x" {
  hosts = ["*.a.example"]
  respond {}
}`)
}

// tlsListener is a TLS listener "https" on port with body inside.
func tlsListener(port, body string) string {
	return `listener "https" {
  address = "127.0.0.1:` + port + `"
  tls {
    certificate "a" {
      cert = "a.pem"
      key  = "a.key"
    }
  }
` + body + `}
`
}

func TestHSTSAndRedirect(t *testing.T) {
	cfg := mustParse(t, tlsListener("8443", `  hsts {
    max_age = "730d"
    include_subdomains = true
    preload = true
  }
`)+`
listener "http" {
  address = "127.0.0.1:8080"
  https_redirect = "https"
}
listener "http2" {
  address = "127.0.0.1:8081"
  https_redirect = 443
}
route "/" {
  respond {}
}
`)
	l := cfg.Listeners
	if got, want := l[0].HSTS.Header(), "max-age=63072000; includeSubDomains; preload"; got != want {
		t.Errorf("hsts %q, want %q", got, want)
	}
	if got, want := *l[1].HTTPSRedirect, (HTTPSRedirect{Listener: "https", Port: 8443}); got != want {
		t.Errorf("redirect %+v, want %+v", got, want)
	}
	if got, want := *l[2].HTTPSRedirect, (HTTPSRedirect{Port: 443}); got != want {
		t.Errorf("redirect %+v, want %+v", got, want)
	}
	if l[0].HTTPSRedirect != nil || l[1].HSTS != nil {
		t.Errorf("listeners %+v", l)
	}
	cfg = mustParse(t, tlsListener("0", "  hsts {}\n")+`route "/" {
  respond {}
}
`)
	if got, want := cfg.Listeners[0].HSTS.Header(), "max-age=31536000"; got != want {
		t.Errorf("default hsts %q, want %q", got, want)
	}
}

func TestHSTSAndRedirectErrors(t *testing.T) {
	route := "route \"/\" {\n  respond {}\n}\n"
	for _, tc := range []struct {
		src  string
		want []string
	}{
		{`listener "http" {
  address = "127.0.0.1:0"
  hsts {}
}`, []string{"file.hcl:3", `listener "http": hsts is sent only over TLS`}},
		{tlsListener("0", "  hsts {}\n  hsts {}\n"), []string{"file.hcl:10", "more than one hsts block"}},
		{tlsListener("0", "  hsts {\n    max_age = \"1y\"\n  }\n"), []string{"file.hcl:10", `hsts.max_age: must be a duration of whole seconds`}},
		{tlsListener("0", "  hsts {\n    max_age = \"1.5s\"\n  }\n"), []string{"file.hcl:10", "whole seconds"}},
		{tlsListener("0", "  hsts {\n    max_age = \"-1s\"\n  }\n"), []string{"file.hcl:10", "whole seconds"}},
		{tlsListener("0", "  hsts {\n    max_age = \"731d\"\n  }\n"), []string{"file.hcl:10", "between 0s and 730d"}},
		{tlsListener("0", "  hsts {\n    max_age = 86400\n  }\n"), []string{"file.hcl:10", "must be a string"}},
		{tlsListener("0", "  hsts {\n    preload = true\n  }\n"), []string{"file.hcl:10", "preload needs include_subdomains = true"}},
		{tlsListener("0", "  hsts {\n    max_age = \"30d\"\n    include_subdomains = true\n    preload = true\n  }\n"), []string{"file.hcl:12", "at least 365d"}},
		{tlsListener("0", "  hsts {\n    max_ages = \"30d\"\n  }\n"), []string{"file.hcl:10", `Unsupported argument`}},
		{tlsListener("0", "  https_redirect = 443\n"), []string{"file.hcl:9", "a TLS listener cannot redirect to https"}},
		{`listener "http" {
  address = "127.0.0.1:0"
  https_redirect = "nowhere"
}`, []string{"file.hcl:3,20-29", `https_redirect names "nowhere", which is not a TLS listener`}},
		{`listener "http" {
  address = "127.0.0.1:0"
  https_redirect = "other"
}
listener "other" {
  address = "127.0.0.1:0"
}`, []string{"file.hcl:3", `names "other", which is not a TLS listener`}},
		{tlsListener("0", "") + `listener "http" {
  address = "127.0.0.1:80"
  https_redirect = "https"
}`, []string{"file.hcl:12", "whose port is chosen by the kernel"}},
		{`listener "http" {
  address = "127.0.0.1:0"
  https_redirect = 70000
}`, []string{"file.hcl:3", "between 1 and 65535"}},
		{`listener "http" {
  address = "127.0.0.1:0"
  https_redirect = true
}`, []string{"file.hcl:3", "must name a TLS listener"}},
	} {
		src := tc.src + "\n" + route
		_, err := parse(t, src)
		wantError(t, src, err, tc.want...)
	}
}

func TestParseMaxAge(t *testing.T) {
	for in, want := range map[string]time.Duration{"0s": 0, "0d": 0, "1d": 24 * time.Hour, "365d": 365 * 24 * time.Hour, "86400s": 24 * time.Hour, "2h30m": 150 * time.Minute} {
		if got, err := ParseMaxAge(in); err != nil || got != want {
			t.Errorf("ParseMaxAge(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "d", "-1d", "+1d", "1.5d", "1 d", "99999d", "1ms", "-5s", "1y"} {
		if got, err := ParseMaxAge(in); err == nil {
			t.Errorf("ParseMaxAge(%q) = %v, want an error", in, got)
		}
	}
}
