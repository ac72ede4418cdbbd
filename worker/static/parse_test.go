package static

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

func TestNormalizeRange(t *testing.T) {
	tests := []struct {
		header string
		size   int64
		max    int
		want   string
	}{
		{"bytes=0-9", 100, 16, "bytes=0-9"},
		{" bytes = 0-9", 100, 16, "bytes=0-9"},
		{"none=0-9", 100, 16, ""},
		{"bytes", 100, 16, ""},
		{"bytes=0-9, ,20-29", 100, 16, "bytes=0-29"},
		{"bytes=0-9,200-299", 1000, 16, "bytes=0-9,200-299"},
		{"bytes=200-299,0-9", 1000, 16, "bytes=0-9,200-299"},
		{"bytes=0-9,200-299", 1000, 1, ""},
		{"bytes=-5", 100, 16, "bytes=95-99"},
		{"bytes=-500", 100, 16, "bytes=0-99"},
		{"bytes=50-", 100, 16, "bytes=50-99"},
		{"bytes=99999999999999999999999-", 100, 16, "bytes=100-"},
		{"bytes=0-99999999999999999999999", 100, 16, "bytes=0-99"},
		{"bytes=100-", 100, 16, "bytes=100-"},
		{"bytes=9-0", 100, 16, "bytes=100-"},
		{"bytes=+1-2", 100, 16, "bytes=100-"},
		{"bytes=1", 100, 16, "bytes=100-"},
		{"bytes=,", 100, 16, "bytes=100-"},
		{"bytes=-0", 100, 16, "bytes=100-"},
		{"bytes=0-0", 0, 16, "bytes=0-"},
	}
	for _, tt := range tests {
		if got := normalizeRange(tt.header, tt.size, tt.max); got != tt.want {
			t.Errorf("normalizeRange(%q, %d, %d) = %q, want %q", tt.header, tt.size, tt.max, got, tt.want)
		}
	}
}

func TestResolvePath(t *testing.T) {
	tests := []struct {
		p      string
		name   string
		dir    bool
		status int
	}{
		{"", ".", false, 0},
		{"/", ".", true, 0},
		{"/a/b", "a/b", false, 0},
		{"/a/b/", "a/b", true, 0},
		{"//a//b", "a/b", false, 0},
		{"/a/.", "a", true, 0},
		{"/a/b/..", "a", true, 0},
		{"/a/../b", "b", false, 0},
		{"/..", "", false, 400},
		{"/a/../..", "", false, 400},
		{"/a\x00", "", false, 400},
		{"/\xff", "", false, 400},
		{"/" + strings.Repeat("x", 256), "", false, 404},
		{"/" + strings.Repeat("x", 255), strings.Repeat("x", 255), false, 0},
		{strings.Repeat("/abc", 1100), "", false, 404},
		{"/ü €/x y", "ü €/x y", false, 0},
	}
	for _, tt := range tests {
		name, dir, status := resolvePath(tt.p)
		if name != tt.name || dir != tt.dir || status != tt.status {
			t.Errorf("resolvePath(%q) = %q, %v, %d; want %q, %v, %d", tt.p, name, dir, status, tt.name, tt.dir, tt.status)
		}
	}
}

func TestAcceptQuality(t *testing.T) {
	tests := []struct {
		header, coding string
		want           int
	}{
		{"", "gzip", 0},
		{"gzip", "gzip", 1000},
		{"GZIP", "gzip", 1000},
		{"deflate, gzip;q=0.5", "gzip", 500},
		{"gzip;q=0", "gzip", 0},
		{"gzip; q=0.001", "gzip", 1},
		{"gzip;q=1.000", "gzip", 1000},
		{"gzip;q=1.5", "gzip", 0},
		{"gzip;q=0.5555", "gzip", 0},
		{"gzip;q=-1", "gzip", 0},
		{"*", "br", 1000},
		{"*;q=0.3, br;q=0.7", "br", 700},
		{"br;q=0.7, *;q=0.3", "br", 700},
		{"*;q=0.3", "gzip", 300},
		{"x-gzip", "gzip", 1000},
		{"identity", "br", 0},
	}
	for _, tt := range tests {
		if got := acceptQuality(tt.header, tt.coding); got != tt.want {
			t.Errorf("acceptQuality(%q, %q) = %d, want %d", tt.header, tt.coding, got, tt.want)
		}
	}
}

// FuzzNormalizeRange checks that the rewritten header is one ServeContent
// can only answer within bounds: "" (whole file), the 416 form, or sorted,
// disjoint, satisfiable ranges, at most max of them.
func FuzzNormalizeRange(f *testing.F) {
	for _, s := range []string{"bytes=0-9", "bytes=-5,10-,3-4", "bytes=0-0,2-2,4-4,6-6", "Bytes = 1-2", "bytes=9-0", "items=1-2", "bytes=,,"} {
		f.Add(s, int64(100), 4)
	}
	f.Fuzz(func(t *testing.T, header string, size int64, maxRanges int) {
		if size < 0 || maxRanges < 1 || maxRanges > 1000 {
			return
		}
		got := normalizeRange(header, size, maxRanges)
		if got == "" || got == "bytes="+strconv.FormatInt(size, 10)+"-" {
			return
		}
		set, ok := strings.CutPrefix(got, "bytes=")
		if !ok {
			t.Fatalf("%q -> %q", header, got)
		}
		prev := int64(math.MinInt64)
		n := 0
		for spec := range strings.SplitSeq(set, ",") {
			a, b, _ := strings.Cut(spec, "-")
			first, err1 := strconv.ParseInt(a, 10, 64)
			last, err2 := strconv.ParseInt(b, 10, 64)
			if err1 != nil || err2 != nil || first > last || last >= size || first <= prev {
				t.Fatalf("%q (size %d) -> %q: bad range %q", header, size, got, spec)
			}
			prev = last + 1
			n++
		}
		if n > maxRanges {
			t.Fatalf("%q -> %q: %d ranges over %d", header, got, n, maxRanges)
		}
	})
}

// FuzzResolvePath checks that a resolved name never leaves the root and is
// a clean relative name, and that refused paths are refused with 400 or 404.
func FuzzResolvePath(f *testing.F) {
	for _, s := range []string{"/", "/a/b/", "/../x", "/a/./b/../c", "//x//y", "/a\x00", "/\xff", "/é/ü.txt"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		name, _, status := resolvePath(p)
		switch status {
		case 0:
		case http.StatusBadRequest, http.StatusNotFound:
			return
		default:
			t.Fatalf("%q: status %d", p, status)
		}
		if name == "." {
			return
		}
		for seg := range strings.SplitSeq(name, "/") {
			if seg == "" || seg == "." || seg == ".." || strings.IndexByte(seg, 0) >= 0 {
				t.Fatalf("%q -> %q: segment %q", p, name, seg)
			}
		}
	})
}
