package config

import (
	"testing"
	"time"
)

// FuzzHostPattern checks that ParseHostPattern never panics and that its
// canonical form is a fixed point that the request side's matching could
// produce: lower case, no trailing dot, no port.
func FuzzHostPattern(f *testing.F) {
	for _, s := range []string{"example.org", "*.Example.org.", "[::1]", "192.0.2.1:80", ".a", "*", "a..b", "fe80::1%lo"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseHostPattern(s)
		if err != nil {
			return
		}
		again, err := ParseHostPattern(p)
		if err != nil || again != p {
			t.Fatalf("ParseHostPattern(%q) = %q, which parses as %q, %v", s, p, again, err)
		}
		for i := 0; i < len(p); i++ {
			if c := p[i]; 'A' <= c && c <= 'Z' || c == '/' || c == '[' || c > 0x7e {
				t.Fatalf("ParseHostPattern(%q) = %q holds %q", s, p, c)
			}
		}
	})
}

// FuzzMaxAge checks that ParseMaxAge never panics and accepts only whole,
// non-negative seconds.
func FuzzMaxAge(f *testing.F) {
	for _, s := range []string{"365d", "0s", "1.5s", "-1d", "99999999999999999999d", "1h30m"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseMaxAge(s)
		if err == nil && (v < 0 || v%time.Second != 0) {
			t.Fatalf("ParseMaxAge(%q) = %v", s, v)
		}
	})
}
