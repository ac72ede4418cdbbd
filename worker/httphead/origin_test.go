package httphead

import (
	"strings"
	"testing"
)

func TestOriginFromRaw(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"complete head", "GET / HTTP/1.1\r\nHost: x\r\nOrigin: https://a.example\r\n\r\n", "https://a.example"},
		{"case and whitespace", "GET / HTTP/1.1\r\norIGIN:\t https://a.example:8443 \t\r\n\r\n", "https://a.example:8443"},
		{"null origin", "GET / HTTP/1.1\r\nOrigin: null\r\n\r\n", "null"},
		{"truncated after Origin", "GET / HTTP/1.1\r\nOrigin: https://a\r\nX-Lo", "https://a"},
		{"truncated inside Origin", "GET / HTTP/1.1\r\nOrigin: https://a", ""},
		{"bare LF lines", "GET / HTTP/1.1\nOrigin: https://a\n\n", "https://a"},
		{"leading empty lines", "\r\n\r\nGET / HTTP/1.1\r\nOrigin: https://a\r\n\r\n", "https://a"},
		{"malformed request line", "GET\x00 /\tgarbage\r\nOrigin: https://a\r\n\r\n", "https://a"},
		{"no Origin", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", ""},
		{"Origin in request line", "Origin: https://a\r\n\r\n", ""},
		{"Origin after head", "GET / HTTP/1.1\r\nHost: x\r\n\r\nOrigin: https://a\r\n", ""},
		{"space before colon", "GET / HTTP/1.1\r\nOrigin : https://a\r\n\r\n", ""},
		{"longer name", "GET / HTTP/1.1\r\nOrigin-X: https://a\r\n\r\n", ""},
		{"empty value", "GET / HTTP/1.1\r\nOrigin:\r\nOrigin: https://b\r\n\r\n", ""},
		{"first invalid wins", "GET / HTTP/1.1\r\nOrigin: a b\r\nOrigin: https://b\r\n\r\n", ""},
		{"bare CR in value", "GET / HTTP/1.1\r\nOrigin: https://a\rSet-Cookie: x\r\n\r\n", ""},
		{"NUL in value", "GET / HTTP/1.1\r\nOrigin: https://a\x00\r\n\r\n", ""},
		{"obs-text in value", "GET / HTTP/1.1\r\nOrigin: https://\xc3\xa9\r\n\r\n", ""},
		{"at length cap", "GET / HTTP/1.1\r\nOrigin: " + strings.Repeat("a", maxOriginLen) + "\r\n\r\n", strings.Repeat("a", maxOriginLen)},
		{"over length cap", "GET / HTTP/1.1\r\nOrigin: " + strings.Repeat("a", maxOriginLen+1) + "\r\n\r\n", ""},
		{"empty input", "", ""},
	}
	for _, tt := range tests {
		got := OriginFromRaw([]byte(tt.in))
		if got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
		if got != "" && !ValidFieldValue(got) {
			t.Errorf("%s: result %q fails ValidFieldValue", tt.name, got)
		}
	}
}

func TestValidField(t *testing.T) {
	names := []struct {
		in   string
		want bool
	}{
		{"Content-Type", true},
		{"x-a!#$%&'*+.^_`|~1", true},
		{"", false},
		{"A B", false},
		{"A:B", false},
		{"A\r\nB", false},
		{"A\x00", false},
		{"Caf\xc3\xa9", false},
		{"(x)", false},
	}
	for _, tt := range names {
		if got := ValidFieldName(tt.in); got != tt.want {
			t.Errorf("ValidFieldName(%q): got %t, want %t", tt.in, got, tt.want)
		}
	}
	values := []struct {
		in   string
		want bool
	}{
		{"", true},
		{"text/html; charset=utf-8", true},
		{" \tpadded\t ", true},
		{"caf\xc3\xa9", true},
		{"a\r\nSet-Cookie: x", false},
		{"a\rb", false},
		{"a\nb", false},
		{"a\x00b", false},
		{"a\x1bb", false},
		{"a\x7fb", false},
	}
	for _, tt := range values {
		if got := ValidFieldValue(tt.in); got != tt.want {
			t.Errorf("ValidFieldValue(%q): got %t, want %t", tt.in, got, tt.want)
		}
	}
}
