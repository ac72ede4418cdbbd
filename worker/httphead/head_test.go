package httphead

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

// headErrorTests lists refused heads, with the error each must produce.
var headErrorTests = []struct {
	name string
	in   string
	want string // errName of the error
}{
	// End of input.
	{"empty input", "", "EOF"},
	{"only empty lines", "\r\n\r\n", "EOF"},
	{"EOF in request line", "GET / HT", "unexpected EOF"},
	{"EOF after request line", "GET / HTTP/1.1\r\n", "unexpected EOF"},
	{"EOF in headers", "GET / HTTP/1.1\r\nHost: x\r\n", "unexpected EOF"},
	{"EOF in final CRLF", "GET / HTTP/1.1\r\nHost: x\r\n\r", "unexpected EOF"},

	// Request line.
	{"too many empty lines", strings.Repeat("\r\n", 5) + "GET / HTTP/1.1\r\nHost: x\r\n\r\n", "too_many_empty_lines"},
	{"double SP after method", "GET  / HTTP/1.1\r\nHost: x\r\n\r\n", "malformed_request_line"},
	{"double SP after target", "GET /  HTTP/1.1\r\nHost: x\r\n\r\n", "malformed_request_line"},
	{"trailing SP", "GET / HTTP/1.1 \r\nHost: x\r\n\r\n", "malformed_request_line"},
	{"leading SP", " GET / HTTP/1.1\r\nHost: x\r\n\r\n", "malformed_request_line"},
	{"HTAB separator", "GET\t/ HTTP/1.1\r\nHost: x\r\n\r\n", "malformed_request_line"},
	{"HTAB in target", "GET /a\tb HTTP/1.1\r\nHost: x\r\n\r\n", "malformed_request_line"},
	{"no version", "GET /\r\nHost: x\r\n\r\n", "malformed_request_line"},
	{"method only", "GET\r\nHost: x\r\n\r\n", "malformed_request_line"},
	{"space in target", "GET /a b HTTP/1.1\r\nHost: x\r\n\r\n", "malformed_request_line"},
	{"empty request line after CRLF", "\r\n \r\n", "malformed_request_line"},
	{"method not a token", "G(T / HTTP/1.1\r\nHost: x\r\n\r\n", "invalid_method"},
	{"method with obs-text", "G\xc9T / HTTP/1.1\r\nHost: x\r\n\r\n", "invalid_method"},
	{"version without minor", "GET / HTTP/1\r\nHost: x\r\n\r\n", "invalid_version"},
	{"lower-case version", "GET / http/1.1\r\nHost: x\r\n\r\n", "invalid_version"},
	{"version with suffix", "GET / HTTP/1.1x\r\nHost: x\r\n\r\n", "invalid_version"},
	{"two-digit major", "GET / HTTP/11.1\r\nHost: x\r\n\r\n", "invalid_version"},
	{"garbage version", "GET / FOO\r\nHost: x\r\n\r\n", "invalid_version"},
	{"HTTP/2.0", "GET / HTTP/2.0\r\nHost: x\r\n\r\n", "unsupported_version"},
	{"HTTP/1.10", "GET / HTTP/1.10\r\nHost: x\r\n\r\n", "invalid_version"},
	{"HTTP/0.9", "GET / HTTP/0.9\r\nHost: x\r\n\r\n", "unsupported_version"},
	{"h2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "unsupported_version"},
	{"CONNECT", "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", "connect_refused"},
	{"CONNECT origin-form", "CONNECT /x HTTP/1.1\r\nHost: x\r\n\r\n", "connect_refused"},
	{"DEL in target", "GET /a\x7fb HTTP/1.1\r\nHost: x\r\n\r\n", "invalid_target"},
	{"obs-text in target", "GET /\xc3\xa9 HTTP/1.1\r\nHost: x\r\n\r\n", "invalid_target"},
	{"CTL in target", "GET /a\x01b HTTP/1.1\r\nHost: x\r\n\r\n", "invalid_target"},
	{"fragment", "GET /a#frag HTTP/1.1\r\nHost: x\r\n\r\n", "invalid_target"},
	{"asterisk with GET", "GET * HTTP/1.1\r\nHost: x\r\n\r\n", "invalid_target"},
	{"authority-form with GET", "GET example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n", "invalid_target"},
	{"relative target", "GET a/b HTTP/1.1\r\nHost: x\r\n\r\n", "invalid_target"},
	{"ftp scheme", "GET ftp://x/ HTTP/1.1\r\nHost: x\r\n\r\n", "invalid_target"},
	{"absolute without authority", "GET http:/x HTTP/1.1\r\nHost: x\r\n\r\n", "invalid_target"},
	{"absolute opaque", "GET http:x HTTP/1.1\r\nHost: x\r\n\r\n", "invalid_target"},
	{"absolute with userinfo", "GET http://u:p@x/ HTTP/1.1\r\nHost: x\r\n\r\n", "invalid_target"},
	{"absolute bad port", "GET http://x:port/ HTTP/1.1\r\nHost: x\r\n\r\n", "invalid_target"},
	{"bad escape", "GET /%zz HTTP/1.1\r\nHost: x\r\n\r\n", "invalid_target"},
	{"backslash in target", "GET /a\\b HTTP/1.1\r\nHost: x\r\n\r\n", "invalid_target"},
	{"double quote in target", "GET /a\"b HTTP/1.1\r\nHost: x\r\n\r\n", "invalid_target"},
	{"braces in target", "GET /{a} HTTP/1.1\r\nHost: x\r\n\r\n", "invalid_target"},
	{"pipe in target", "GET /?a|b HTTP/1.1\r\nHost: x\r\n\r\n", "invalid_target"},
	{"angle brackets in target", "GET /<a> HTTP/1.1\r\nHost: x\r\n\r\n", "invalid_target"},
	{"caret in target", "GET /a^b HTTP/1.1\r\nHost: x\r\n\r\n", "invalid_target"},
	{"backtick in target", "GET /a`b HTTP/1.1\r\nHost: x\r\n\r\n", "invalid_target"},
	{"square bracket in path", "GET /a[0] HTTP/1.1\r\nHost: x\r\n\r\n", "invalid_target"},
	{"vertical tab in target", "GET /a\vb HTTP/1.1\r\nHost: x\r\n\r\n", "invalid_target"},
	{"form feed in target", "GET /a\fb HTTP/1.1\r\nHost: x\r\n\r\n", "invalid_target"},

	// Line endings and forbidden bytes.
	{"bare LF after request line", "GET / HTTP/1.1\nHost: x\r\n\r\n", "bare_lf"},
	{"bare LF after field", "GET / HTTP/1.1\r\nHost: x\n\r\n", "bare_lf"},
	{"bare LF as final line", "GET / HTTP/1.1\r\nHost: x\r\n\n", "bare_lf"},
	{"bare LF as leading line", "\nGET / HTTP/1.1\r\nHost: x\r\n\r\n", "bare_lf"},
	{"bare CR in request line", "GET / HTTP/1.1\rHost: x\r\n\r\n", "bare_cr"},
	{"bare CR in value", "GET / HTTP/1.1\r\nHost: x\rX: y\r\n\r\n", "bare_cr"},
	{"CR CR LF", "GET / HTTP/1.1\r\r\nHost: x\r\n\r\n", "bare_cr"},
	{"bare CR before the body", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\rhello", "bare_cr"},
	{"bare CR ends the head", "GET / HTTP/1.1\r\nHost: x\r\n\r\r", "bare_cr"},
	{"NUL in target", "GET /a\x00b HTTP/1.1\r\nHost: x\r\n\r\n", "nul_byte"},
	{"NUL in value", "GET / HTTP/1.1\r\nHost: x\r\nX: a\x00b\r\n\r\n", "nul_byte"},
	{"NUL in name", "GET / HTTP/1.1\r\nHost: x\r\nX\x00Y: a\r\n\r\n", "nul_byte"},

	// Field lines.
	{"obs-fold", "GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n", "obs_fold"},
	{"obs-fold with HTAB", "GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n\tb\r\n\r\n", "obs_fold"},
	{"whitespace before first field", "GET / HTTP/1.1\r\n Host: x\r\n\r\n", "obs_fold"},
	{"no colon", "GET / HTTP/1.1\r\nHost: x\r\nNoColon\r\n\r\n", "malformed_field_line"},
	{"SP before colon", "GET / HTTP/1.1\r\nHost : x\r\n\r\n", "space_before_colon"},
	{"HTAB before colon", "GET / HTTP/1.1\r\nHost\t: x\r\n\r\n", "space_before_colon"},
	{"empty name", "GET / HTTP/1.1\r\nHost: x\r\n: v\r\n\r\n", "invalid_field_name"},
	{"separator in name", "GET / HTTP/1.1\r\nHost: x\r\nX(Y): v\r\n\r\n", "invalid_field_name"},
	{"obs-text in name", "GET / HTTP/1.1\r\nHost: x\r\nX\xc9: v\r\n\r\n", "invalid_field_name"},
	{"space in name", "GET / HTTP/1.1\r\nHost: x\r\nX Y: v\r\n\r\n", "invalid_field_name"},
	{"CTL in value", "GET / HTTP/1.1\r\nHost: x\r\nX: a\x01b\r\n\r\n", "invalid_field_value"},
	{"DEL in value", "GET / HTTP/1.1\r\nHost: x\r\nX: a\x7fb\r\n\r\n", "invalid_field_value"},
	{"ESC in value", "GET / HTTP/1.1\r\nHost: x\r\nX: \x1b[31m\r\n\r\n", "invalid_field_value"},

	// Host.
	{"missing Host", "GET / HTTP/1.1\r\n\r\n", "missing_host"},
	{"missing Host absolute-form", "GET http://x/ HTTP/1.1\r\n\r\n", "missing_host"},
	{"two Host fields", "GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", "duplicate_host"},
	{"two Host fields HTTP/1.0", "GET / HTTP/1.0\r\nHost: a\r\nhost: b\r\n\r\n", "duplicate_host"},
	{"Host with space", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", "invalid_host"},
	{"Host with slash", "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", "invalid_host"},
	{"Host port not digits", "GET / HTTP/1.1\r\nHost: a:8o\r\n\r\n", "invalid_host"},
	{"Host port with sign", "GET / HTTP/1.1\r\nHost: a:+80\r\n\r\n", "invalid_host"},
	{"Host two colons", "GET / HTTP/1.1\r\nHost: a:80:81\r\n\r\n", "invalid_host"},
	{"Host IPv6 without brackets", "GET / HTTP/1.1\r\nHost: ::1\r\n\r\n", "invalid_host"},
	{"Host IPv6 port not digits", "GET / HTTP/1.1\r\nHost: [::1]:x\r\n\r\n", "invalid_host"},
	{"Host junk after IP-literal", "GET / HTTP/1.1\r\nHost: [::1]x\r\n\r\n", "invalid_host"},
	{"Host unclosed IP-literal", "GET / HTTP/1.1\r\nHost: [::1\r\n\r\n", "invalid_host"},
	{"Host empty", "GET / HTTP/1.1\r\nHost:\r\n\r\n", "invalid_host"},
	{"Host blank", "GET / HTTP/1.1\r\nHost:   \r\n\r\n", "invalid_host"},
	{"Host empty HTTP/1.0", "GET / HTTP/1.0\r\nHost:\r\n\r\n", "invalid_host"},
	{"Host port only", "GET / HTTP/1.1\r\nHost: :80\r\n\r\n", "invalid_host"},
	{"Host empty IP-literal", "GET / HTTP/1.1\r\nHost: []\r\n\r\n", "invalid_host"},
	{"Host empty absolute-form", "GET http://x/ HTTP/1.1\r\nHost:\r\n\r\n", "invalid_host"},

	// Content-Length.
	{"CL plus sign", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\n", "invalid_content_length"},
	{"CL minus sign", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", "invalid_content_length"},
	{"CL inner space", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1 2\r\n\r\n", "invalid_content_length"},
	{"CL hex", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0x5\r\n\r\n", "invalid_content_length"},
	{"CL empty", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: \r\n\r\n", "invalid_content_length"},
	{"CL empty element", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5,\r\n\r\n", "invalid_content_length"},
	{"CL over int64", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 9223372036854775808\r\n\r\n", "invalid_content_length"},
	{"CL 20 digits", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n", "invalid_content_length"},
	{"CL differing list", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 6\r\n\r\n", "conflicting_content_length"},
	{"CL differing fields", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", "conflicting_content_length"},

	// Transfer-Encoding.
	{"TE in HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", "te_in_http10"},
	{"TE and CL", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", "te_and_cl"},
	{"CL and TE", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", "te_and_cl"},
	{"TE gzip, chunked", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", "unsupported_transfer_coding"},
	{"TE chunked, gzip", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", "invalid_transfer_coding"},
	{"TE identity", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\n\r\n", "invalid_transfer_coding"},
	{"TE xchunked", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n", "invalid_transfer_coding"},
	{"TE chunked twice", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", "unsupported_transfer_coding"},
	{"TE chunked with params", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked;q=1\r\n\r\n", "unsupported_transfer_coding"},
	{"TE empty", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: \r\n\r\n", "invalid_transfer_coding"},

	// Expect.
	{"Expect unknown", "POST / HTTP/1.1\r\nHost: x\r\nExpect: foo\r\n\r\n", "unsupported_expectation"},
	{"Expect list", "POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue, foo\r\n\r\n", "unsupported_expectation"},
	{"Expect empty", "POST / HTTP/1.1\r\nHost: x\r\nExpect: \r\n\r\n", "unsupported_expectation"},
	{"Expect in HTTP/1.0", "POST / HTTP/1.0\r\nExpect: foo\r\n\r\n", "unsupported_expectation"},
}

func TestReadHeadErrors(t *testing.T) {
	for _, tt := range headErrorTests {
		for _, size := range bufSizes {
			h, err, _ := readString(t, tt.in, size, Limits{})
			if got := errName(err); got != tt.want {
				t.Errorf("%s (bufio %d): got error %q, want %q (head %+v)", tt.name, size, got, tt.want, h)
			}
			if err != nil && h != nil {
				t.Errorf("%s (bufio %d): got a head with error %v", tt.name, size, err)
			}
			var he *Error
			if errors.As(err, &he) && he.Status != he.Code.Status() {
				t.Errorf("%s: Status %d, Code.Status() %d", tt.name, he.Status, he.Code.Status())
			}
		}
	}
}

func TestReadHead(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Head // Header and URL are not compared here
		hdr  http.Header
		url  string
	}{
		{
			name: "simple GET",
			in:   "GET /a/b?c=d HTTP/1.1\r\nHost: example.com\r\n\r\n",
			want: Head{Method: "GET", Target: "/a/b?c=d", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
				Host: "example.com"},
			hdr: http.Header{"Host": {"example.com"}},
			url: "/a/b?c=d",
		},
		{
			name: "leading empty lines",
			in:   "\r\n\r\n\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n",
			want: Head{Method: "GET", Target: "/", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Host: "x"},
			hdr:  http.Header{"Host": {"x"}},
			url:  "/",
		},
		{
			name: "HTTP/1.0 without Host",
			in:   "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n",
			want: Head{Method: "GET", Target: "/", Proto: "HTTP/1.0", ProtoMajor: 1, KeepAlive: true},
			hdr:  http.Header{"Connection": {"Keep-Alive"}},
			url:  "/",
		},
		{
			name: "HTTP/1.2 is served as HTTP/1.1",
			in:   "GET / HTTP/1.2\r\nHost: x\r\n\r\n",
			want: Head{Method: "GET", Target: "/", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Host: "x"},
			hdr:  http.Header{"Host": {"x"}},
			url:  "/",
		},
		{
			name: "HTTP/1.9 is served as HTTP/1.1",
			in:   "GET / HTTP/1.9\r\nHost: x\r\nConnection: close\r\n\r\n",
			want: Head{Method: "GET", Target: "/", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Host: "x", Close: true},
			hdr:  http.Header{"Host": {"x"}, "Connection": {"close"}},
			url:  "/",
		},
		{
			name: "Content-Length and whitespace",
			in:   "POST /u HTTP/1.1\r\nhost: h:8080\r\ncontent-length:\t 12 \t\r\nX-Empty:\r\n\r\n",
			want: Head{Method: "POST", Target: "/u", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Host: "h:8080",
				ContentLength: 12},
			hdr: http.Header{"Host": {"h:8080"}, "Content-Length": {"12"}, "X-Empty": {""}},
			url: "/u",
		},
		{
			name: "identical Content-Length duplicates",
			in:   "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 5\r\nContent-Length: 005\r\n\r\n",
			want: Head{Method: "POST", Target: "/", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Host: "x",
				ContentLength: 5},
			hdr: http.Header{"Host": {"x"}, "Content-Length": {"5, 5", "005"}},
			url: "/",
		},
		{
			name: "Content-Length max int64",
			in:   "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 9223372036854775807\r\n\r\n",
			want: Head{Method: "POST", Target: "/", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Host: "x",
				ContentLength: 9223372036854775807},
			hdr: http.Header{"Host": {"x"}, "Content-Length": {"9223372036854775807"}},
			url: "/",
		},
		{
			name: "chunked, close, 100-continue",
			in: "PUT /f HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n" +
				"Connection: foo, CLOSE\r\nExpect: 100-Continue\r\n\r\n",
			want: Head{Method: "PUT", Target: "/f", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Host: "x",
				ContentLength: -1, Chunked: true, Close: true, Expect100: true},
			hdr: http.Header{"Host": {"x"}, "Transfer-Encoding": {"Chunked"}, "Connection": {"foo, CLOSE"},
				"Expect": {"100-Continue"}},
			url: "/f",
		},
		{
			name: "100-continue ignored in HTTP/1.0",
			in:   "POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n",
			want: Head{Method: "POST", Target: "/", Proto: "HTTP/1.0", ProtoMajor: 1, ContentLength: 1},
			hdr:  http.Header{"Expect": {"100-continue"}, "Content-Length": {"1"}},
			url:  "/",
		},
		{
			name: "absolute-form overrides Host",
			in:   "GET HTTP://Example.com:81/p?q HTTP/1.1\r\nHost: other\r\n\r\n",
			want: Head{Method: "GET", Target: "HTTP://Example.com:81/p?q", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
				Host: "Example.com:81"},
			hdr: http.Header{"Host": {"other"}},
			url: "http://Example.com:81/p?q",
		},
		{
			name: "asterisk-form OPTIONS",
			in:   "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
			want: Head{Method: "OPTIONS", Target: "*", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Host: "x"},
			hdr:  http.Header{"Host": {"x"}},
			url:  "*",
		},
		{
			name: "extension method, escaped target bytes, repeated field, obs-text value",
			in:   "M-SEARCH //a/%7Bb%7D%7Cc HTTP/1.1\r\nHost: [::1]:80\r\nX-A: 1\r\nx-a: 2\r\nX-U: caf\xc3\xa9\r\n\r\n",
			want: Head{Method: "M-SEARCH", Target: "//a/%7Bb%7D%7Cc", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
				Host: "[::1]:80"},
			hdr: http.Header{"Host": {"[::1]:80"}, "X-A": {"1", "2"}, "X-U": {"caf\xc3\xa9"}},
			url: "//a/%7Bb%7D%7Cc",
		},
	}
	for _, tt := range tests {
		for _, size := range bufSizes {
			h, err, rest := readString(t, tt.in+"NEXT", size, Limits{})
			if err != nil {
				t.Errorf("%s (bufio %d): got error %v, want success", tt.name, size, err)
				continue
			}
			if rest != "NEXT" {
				t.Errorf("%s (bufio %d): left %q unread, want %q", tt.name, size, rest, "NEXT")
			}
			if got := h.URL.String(); got != tt.url {
				t.Errorf("%s: got URL %q, want %q", tt.name, got, tt.url)
			}
			if !reflect.DeepEqual(h.Header, tt.hdr) {
				t.Errorf("%s: got Header %v, want %v", tt.name, h.Header, tt.hdr)
			}
			got := *h
			got.Header, got.URL = nil, nil
			tt.want.Size = len(tt.in) // every byte but "NEXT" is head
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("%s (bufio %d):\ngot  %+v\nwant %+v", tt.name, size, got, tt.want)
			}
		}
	}
}

// TestBufferSizeIndependence checks that every test input gives exactly
// the same result whatever the bufio size.
func TestBufferSizeIndependence(t *testing.T) {
	inputs := []string{
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		browserGET,
		"GET /" + strings.Repeat("a", 100) + " HTTP/1.1\r\nHost: x\r\n\r\n",
	}
	for _, tt := range headErrorTests {
		inputs = append(inputs, tt.in)
	}
	for _, lim := range []Limits{{}, {MaxStartLine: 20, MaxHeaderBytes: 30, MaxHeaderLines: 2}} {
		for _, in := range inputs {
			h, err, rest := readString(t, in, 64<<10, lim)
			if err != nil {
				rest = "" // unspecified after an error
			}
			want := summary(h, err) + "rest=" + rest
			for _, size := range []int{16, 17, 31, 4096} {
				h, err, rest := readString(t, in, size, lim)
				if err != nil {
					rest = ""
				}
				if got := summary(h, err) + "rest=" + rest; got != want {
					t.Errorf("input %q, limits %+v, bufio %d:\ngot  %s\nwant %s", in, lim, size, got, want)
				}
			}
		}
	}
}

func TestPipelined(t *testing.T) {
	in := "POST /one HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello" +
		"GET /two HTTP/1.1\r\nHost: y\r\n\r\n" +
		"GET /three HTTP/1.0\r\n\r\n"
	for _, size := range bufSizes {
		br := bufio.NewReaderSize(strings.NewReader(in), size)
		h1, err := ReadHead(br, Limits{})
		if err != nil {
			t.Fatalf("bufio %d: first head: %v", size, err)
		}
		body := make([]byte, h1.ContentLength)
		if _, err := io.ReadFull(br, body); err != nil || string(body) != "hello" {
			t.Fatalf("bufio %d: body %q, %v", size, body, err)
		}
		h2, err := ReadHead(br, Limits{})
		if err != nil {
			t.Fatalf("bufio %d: second head: %v", size, err)
		}
		h3, err := ReadHead(br, Limits{})
		if err != nil {
			t.Fatalf("bufio %d: third head: %v", size, err)
		}
		got := []string{h1.Target, h2.Target, h3.Target}
		if want := []string{"/one", "/two", "/three"}; !reflect.DeepEqual(got, want) {
			t.Errorf("bufio %d: got targets %q, want %q", size, got, want)
		}
		if _, err := ReadHead(br, Limits{}); err != io.EOF {
			t.Errorf("bufio %d: after the last head got %v, want io.EOF", size, err)
		}
	}
}

// timeoutError is a net.Error as returned by a conn after its deadline.
type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// stallReader returns its data and then err.
type stallReader struct {
	data string
	err  error
}

func (s *stallReader) Read(p []byte) (int, error) {
	if s.data == "" {
		return 0, s.err
	}
	n := copy(p, s.data)
	s.data = s.data[n:]
	return n, nil
}

func TestReadErrorWrapped(t *testing.T) {
	for _, data := range []string{"", "GET / HTTP/1.1\r\nHo"} {
		br := bufio.NewReaderSize(&stallReader{data: data, err: timeoutError{}}, 16)
		_, err := ReadHead(br, Limits{})
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("after %q: got %v, want an error wrapping a net.Error timeout", data, err)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			t.Errorf("after %q: got %v, want a read error", data, err)
		}
	}
}

func TestPersistent(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{"GET / HTTP/1.1\r\nHost: x\r\n\r\n", true},
		{"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", false},
		{"GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, close\r\n\r\n", false},
		{"GET / HTTP/1.0\r\n\r\n", false},
		{"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", true},
		{"GET / HTTP/1.0\r\nConnection: x\r\nConnection: ,Keep-Alive,\r\n\r\n", true},
	}
	for _, tt := range tests {
		h, err, _ := readString(t, tt.in, 4096, Limits{})
		if err != nil {
			t.Fatalf("%q: %v", tt.in, err)
		}
		if got := h.Persistent(); got != tt.want {
			t.Errorf("%q: got Persistent() %t, want %t", tt.in, got, tt.want)
		}
	}
}

func TestHasBody(t *testing.T) {
	tests := []struct {
		h    Head
		want bool
	}{
		{Head{}, false},
		{Head{ContentLength: 1}, true},
		{Head{ContentLength: -1, Chunked: true}, true},
	}
	for _, tt := range tests {
		if got := tt.h.HasBody(); got != tt.want {
			t.Errorf("%+v: got HasBody() %t, want %t", tt.h, got, tt.want)
		}
	}
}

func TestErrorStatus(t *testing.T) {
	tests := []struct {
		code Code
		want int
	}{
		{CodeStartLineTooLong, 414},
		{CodeHeaderTooLarge, 431},
		{CodeTooManyHeaders, 431},
		{CodeTrailerTooLarge, 431},
		{CodeTooManyTrailers, 431},
		{CodeUnsupportedVersion, 505},
		{CodeInvalidVersion, 400},
		{CodeUnsupportedTransfer, 501},
		{CodeConnectRefused, 501},
		{CodeUnsupportedExpect, 417},
		{CodeTEAndCL, 400},
		{CodeInvalidChunk, 400},
		{Code("no_such_code"), 400},
	}
	for _, tt := range tests {
		if got := tt.code.Status(); got != tt.want {
			t.Errorf("%s: got status %d, want %d", tt.code, got, tt.want)
		}
	}
	e := newError(CodeBareCR, "detail")
	if got, want := e.Error(), "httphead: bare_cr: detail"; got != want {
		t.Errorf("got Error() %q, want %q", got, want)
	}
}

// TestRefusedBeforeLF checks that a line already invalid whatever follows
// (a bare CR, a NUL) is refused as soon as its bytes arrive, without waiting
// for an LF the client may never send.
func TestRefusedBeforeLF(t *testing.T) {
	tests := []struct{ name, in, code string }{
		{"bare CR before the body", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\rhello", "bare_cr"},
		{"bare CR in request line", "GET /\rx", "bare_cr"},
		{"bare CR in a field", "GET / HTTP/1.1\r\nHost: x\ry", "bare_cr"},
		{"NUL in a field", "GET / HTTP/1.1\r\nHost: x\x00", "nul_byte"},
		{"TLS ClientHello", "\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03", "nul_byte"},
	}
	for _, tt := range tests {
		for _, size := range bufSizes {
			pr, pw := io.Pipe()
			go func() {
				// Byte by byte, and the pipe stays open: only the bytes
				// already sent can decide.
				for i := 0; i < len(tt.in); i++ {
					if _, err := pw.Write([]byte{tt.in[i]}); err != nil {
						return
					}
				}
			}()
			done := make(chan error, 1)
			go func() {
				_, err := ReadHead(bufio.NewReaderSize(pr, size), Limits{})
				done <- err
			}()
			select {
			case err := <-done:
				var he *Error
				if !errors.As(err, &he) || string(he.Code) != tt.code {
					t.Errorf("%s (bufio %d): got %v, want %s", tt.name, size, err, tt.code)
				}
			case <-time.After(10 * time.Second):
				t.Errorf("%s (bufio %d): still waiting for more input", tt.name, size)
			}
			pr.Close()
		}
	}
}
