package httphead

import "testing"

func TestNormalizePath(t *testing.T) {
	tests := []struct {
		in, raw, decoded string
		bad              bool
	}{
		{in: "/", raw: "/", decoded: "/"},
		{in: "/internal/x", raw: "/internal/x", decoded: "/internal/x"},
		{in: "//internal/x", raw: "/internal/x", decoded: "/internal/x"},
		{in: "/./internal/x", raw: "/internal/x", decoded: "/internal/x"},
		{in: "/a/../internal/x", raw: "/internal/x", decoded: "/internal/x"},
		{in: "/../../internal/x", raw: "/internal/x", decoded: "/internal/x"},
		{in: "/a/%2e%2E/internal/x", raw: "/internal/x", decoded: "/internal/x"},
		{in: "/%69nternal/x", raw: "/internal/x", decoded: "/internal/x"},
		{in: "/a//b///c/", raw: "/a/b/c/", decoded: "/a/b/c/"},
		{in: "/a/b/.", raw: "/a/b/", decoded: "/a/b/"},
		{in: "/a/b/..", raw: "/a/", decoded: "/a/"},
		{in: "/..", raw: "/", decoded: "/"},
		{in: "/a%20b", raw: "/a%20b", decoded: "/a b"},
		{in: "/a%2fb", raw: "/a%2Fb", decoded: "/a/b"},
		{in: "/%7euser", raw: "/~user", decoded: "/~user"},
		{in: "/a%2F..%2Finternal", bad: true},
		{in: "/a%2F%2Fb", bad: true},
		{in: "/a%2F.", bad: true},
		{in: "/a%zz", bad: true},
		{in: "/a%", bad: true},
	}
	for _, tt := range tests {
		raw, decoded, err := NormalizePath(tt.in)
		switch {
		case tt.bad && err == nil:
			t.Errorf("NormalizePath(%q) = %q, %q; want an error", tt.in, raw, decoded)
		case !tt.bad && (err != nil || raw != tt.raw || decoded != tt.decoded):
			t.Errorf("NormalizePath(%q) = %q, %q, %v; want %q, %q", tt.in, raw, decoded, err, tt.raw, tt.decoded)
		}
	}
}

func FuzzNormalizePath(f *testing.F) {
	for _, s := range []string{"/", "//a/./b/../c", "/%2e%2E/x", "/a%2F..%2Fb", "/%7e~", "/a/b/.."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		raw, decoded, err := NormalizePath(p)
		if err != nil {
			return
		}
		// Normal means a fixed point, and the decoded form never climbs.
		raw2, decoded2, err := NormalizePath(raw)
		if err != nil || raw2 != raw || decoded2 != decoded {
			t.Errorf("NormalizePath(%q) = %q, %q; again: %q, %q, %v", p, raw, decoded, raw2, decoded2, err)
		}
		if resolveSegments(decoded) != decoded {
			t.Errorf("NormalizePath(%q): decoded %q not normal", p, decoded)
		}
	})
}

// TestNormalSegments: the shortcut agrees with resolving by segments on
// every path built from a few segments.
func TestNormalSegments(t *testing.T) {
	parts := []string{"", "a", ".", "..", "b.c", "...", "%2F"}
	var paths []string
	for _, a := range parts {
		for _, b := range parts {
			for _, c := range parts {
				paths = append(paths, "/"+a, "/"+a+"/"+b, "/"+a+"/"+b+"/"+c, a+"/"+b)
			}
		}
	}
	for _, p := range paths {
		if got, want := normalSegments(p), p != "" && p[0] == '/' && resolveSplit(p) == p; got != want {
			t.Errorf("normalSegments(%q) = %v, want %v", p, got, want)
		}
	}
}
