package httphead

import (
	"bufio"
	"strings"
	"testing"
)

// headWithStartLine returns a head whose request line is n bytes long,
// CRLF included.
func headWithStartLine(n int) string {
	const fixed = len("GET / HTTP/1.1\r\n")
	return "GET /" + strings.Repeat("a", n-fixed) + " HTTP/1.1\r\nHost: x\r\n\r\n"
}

// headWithHeaderBytes returns a head whose field lines total n bytes,
// CRLFs included (n >= 20).
func headWithHeaderBytes(n int) string {
	const host = "Host: x\r\n"
	filler := n - len(host) - len("X: \r\n")
	return "GET / HTTP/1.1\r\n" + host + "X: " + strings.Repeat("v", filler) + "\r\n\r\n"
}

// headWithLines returns a head with n field lines (n >= 1).
func headWithLines(n int) string {
	var b strings.Builder
	b.WriteString("GET / HTTP/1.1\r\nHost: x\r\n")
	for i := 1; i < n; i++ {
		b.WriteString("X: 1\r\n")
	}
	b.WriteString("\r\n")
	return b.String()
}

func TestLimits(t *testing.T) {
	small := Limits{MaxStartLine: 64, MaxHeaderBytes: 100, MaxHeaderLines: 3}
	tests := []struct {
		name string
		in   string
		lim  Limits
		want string
	}{
		{"start line at default cap", headWithStartLine(8192), Limits{}, ""},
		{"start line one past default cap", headWithStartLine(8193), Limits{}, "start_line_too_long"},
		{"start line far past default cap", headWithStartLine(100000), Limits{}, "start_line_too_long"},
		{"header bytes at default cap", headWithHeaderBytes(32768), Limits{}, ""},
		{"header bytes one past default cap", headWithHeaderBytes(32769), Limits{}, "header_too_large"},
		{"header lines at default cap", headWithLines(100), Limits{}, ""},
		{"header lines one past default cap", headWithLines(101), Limits{}, "too_many_headers"},
		{"start line at small cap", headWithStartLine(64), small, ""},
		{"start line one past small cap", headWithStartLine(65), small, "start_line_too_long"},
		{"header bytes at small cap", headWithHeaderBytes(100), small, ""},
		{"header bytes one past small cap", headWithHeaderBytes(101), small, "header_too_large"},
		{"header lines at small cap", headWithLines(3), small, ""},
		{"header lines one past small cap", headWithLines(4), small, "too_many_headers"},
		{"negative limits mean defaults", headWithLines(100), Limits{-1, -1, -1}, ""},
		// 414 is for a long target; a method filling the line is 400.
		{"method past default cap", strings.Repeat("G", 8193) + " / HTTP/1.1\r\nHost: x\r\n\r\n", Limits{}, "invalid_method"},
		{"method far past default cap", strings.Repeat("G", 100000) + " / HTTP/1.1\r\nHost: x\r\n\r\n", Limits{}, "invalid_method"},
		{"method past small cap", strings.Repeat("G", 65) + " / HTTP/1.1\r\nHost: x\r\n\r\n", small, "invalid_method"},
	}
	for _, tt := range tests {
		for _, size := range bufSizes {
			h, err, _ := readString(t, tt.in, size, tt.lim)
			if got := errName(err); got != tt.want {
				t.Errorf("%s (bufio %d): got error %q, want %q", tt.name, size, got, tt.want)
				continue
			}
			if err == nil && h.Size != len(tt.in) {
				t.Errorf("%s (bufio %d): got Size %d, want %d", tt.name, size, h.Size, len(tt.in))
			}
		}
	}
}

// endlessReader returns prefix and then the byte fill forever, counting
// what it returned.
type endlessReader struct {
	prefix string
	fill   byte
	n      int
}

func (e *endlessReader) Read(p []byte) (int, error) {
	n := copy(p, e.prefix)
	e.prefix = e.prefix[n:]
	for i := n; i < len(p); i++ {
		p[i] = e.fill
	}
	e.n += len(p)
	return len(p), nil
}

// TestEndlessInput checks that a line that never ends makes ReadHead read
// no more than the limit plus one buffer.
func TestEndlessInput(t *testing.T) {
	tests := []struct {
		name   string
		prefix string
		limit  int
		want   string
	}{
		{"endless request line", "GET /", DefaultMaxStartLine, "start_line_too_long"},
		{"endless method", "G", DefaultMaxStartLine, "invalid_method"},
		{"endless field line", "GET / HTTP/1.1\r\nX: ", DefaultMaxHeaderBytes, "header_too_large"},
		{"endless field lines", "GET / HTTP/1.1\r\n" + strings.Repeat("X: 1\r\n", 200), DefaultMaxHeaderBytes, "too_many_headers"},
		{"endless empty lines", strings.Repeat("\r\n", 1000), DefaultMaxStartLine, "too_many_empty_lines"},
	}
	for _, tt := range tests {
		for _, size := range bufSizes {
			er := &endlessReader{prefix: tt.prefix, fill: 'a'}
			_, err := ReadHead(bufio.NewReaderSize(er, size), Limits{})
			if got := errName(err); got != tt.want {
				t.Errorf("%s (bufio %d): got %q, want %q", tt.name, size, got, tt.want)
			}
			if max := len(tt.prefix) + tt.limit + size; er.n > max {
				t.Errorf("%s (bufio %d): read %d bytes, want at most %d", tt.name, size, er.n, max)
			}
		}
	}
}
