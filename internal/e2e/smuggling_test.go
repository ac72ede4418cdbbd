package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// smuggleCase is one raw request (or pipeline of requests) sent in a single
// write on a fresh connection, with the responses it must get.
type smuggleCase struct {
	name string
	raw  string
	// want is the status of every response, in order, interim 100
	// (Continue) responses included.
	want []int
	// bodies, when non-nil, are the expected bodies of the final
	// responses, in order.
	bodies []string
	// closed says the server must close the connection after the last
	// response, and announce it there with "Connection: close". Otherwise
	// the connection must stay open and in sync: a further GET /ok on it
	// must get 200 "ok\n" and nothing else.
	closed bool
	// lateClose marks a close the server can only decide after it has
	// answered: a static route does not read the body, and the transport
	// finds it malformed or too long to drain only afterwards. The last
	// response then cannot announce the close.
	lateClose bool
	// method is the request method the responses answer ("" is GET); it
	// matters for HEAD, whose responses have no body.
	method string
	// wait bounds each read and the wait for the close (default 10 s).
	wait time.Duration
	// idle is how long the client waits before the follow-up request of a
	// connection that stays open.
	idle time.Duration
	// allow says every final response must carry an Allow field.
	allow bool
}

// okGet is the follow-up request that proves a connection is in sync.
const okGet = "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n"

// statuses returns n copies of status.
func statuses(n, status int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = status
	}
	return s
}

// target is a GET of the request-target t.
func target(t string) string { return "GET " + t + " HTTP/1.1\r\nHost: x\r\n\r\n" }

// field is a GET /ok with one more field line, sent as given.
func field(line string) string { return "GET /ok HTTP/1.1\r\nHost: x\r\n" + line + "\r\n\r\n" }

// post is a POST /ok with the given field lines (each ending in CRLF) and body.
func post(fields, body string) string {
	return "POST /ok HTTP/1.1\r\nHost: x\r\n" + fields + "\r\n" + body
}

// clPost is a POST /ok whose body is framed by a correct Content-Length.
func clPost(body string) string { return post(fmt.Sprintf("Content-Length: %d\r\n", len(body)), body) }

// chunked is a POST /ok with Transfer-Encoding: chunked and the raw body.
func chunked(body string) string { return post("Transfer-Encoding: chunked\r\n", body) }

// te is a POST /ok with Transfer-Encoding value v and a last-chunk body.
func te(v string) string { return post("Transfer-Encoding: "+v+"\r\n", "0\r\n\r\n") }

// cl is a POST /ok with the Content-Length field line value v and body.
func cl(v, body string) string { return post("Content-Length: "+v+"\r\n", body) }

// headerSection returns field lines (Host first) totalling exactly n bytes,
// CRLFs included, in lines of at most 4000 bytes.
func headerSection(n int) string {
	var b strings.Builder
	b.WriteString("Host: x\r\n")
	left := n - len("Host: x\r\n")
	for i := 0; left > 0; i++ {
		l := min(left, 4000)
		if rest := left - l; rest > 0 && rest < 14 {
			l -= 14
		}
		fmt.Fprintf(&b, "X-Pad-%03d: %s\r\n", i, strings.Repeat("a", l-13))
		left -= l
	}
	return b.String()
}

// fieldLines returns Host and n-1 more short field lines.
func fieldLines(n int) string {
	var b strings.Builder
	b.WriteString("Host: x\r\n")
	for i := 1; i < n; i++ {
		fmt.Fprintf(&b, "X-F%d: 1\r\n", i)
	}
	return b.String()
}

// smuggledGetA is a complete request hidden in a body: a server that
// misframes the body answers it with "A".
const smuggledGetA = "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"

// smugglingCases are requests the server must frame exactly as RFC 9112 and
// docs/DESIGN.md §3.2 say. References: RFC 9112 section numbers; "Kettle" is James
// Kettle, "HTTP Desync Attacks: Request Smuggling Reborn" (2019).
func smugglingCases() []smuggleCase {
	ok := []int{200}
	bad := []int{400}
	// lineOf returns a GET /ok?… request line of exactly n bytes, CRLF included.
	lineOf := func(n int) string {
		t := "/ok?" + strings.Repeat("a", n-len("GET  HTTP/1.1\r\n")-len("/ok?"))
		return "GET " + t + " HTTP/1.1\r\nHost: x\r\n\r\n"
	}
	big := func(n int) string { return strings.Repeat("a", n) }
	return []smuggleCase{
		// RFC 9112 §2.2: message parsing and line endings.
		{name: "valid GET", raw: okGet, want: ok, bodies: []string{"ok\n"}},
		{name: "bare LF line endings", raw: "GET /ok HTTP/1.1\nHost: x\n\n", want: bad, closed: true},
		{name: "bare LF after request line", raw: "GET /ok HTTP/1.1\nHost: x\r\n\r\n", want: bad, closed: true},
		{name: "bare LF ends header section", raw: "GET /ok HTTP/1.1\r\nHost: x\r\n\n", want: bad, closed: true},
		{name: "bare CR as line end", raw: "GET /ok HTTP/1.1\rHost: x\r\n\r\n", want: bad, closed: true},
		{name: "one empty line before request", raw: "\r\n" + okGet, want: ok},
		{name: "four empty lines before request", raw: strings.Repeat("\r\n", 4) + okGet, want: ok},
		{name: "five empty lines before request", raw: strings.Repeat("\r\n", 5) + okGet, want: bad, closed: true},
		{name: "bare LF before request", raw: "\n" + okGet, want: bad, closed: true},
		{name: "whitespace line before request", raw: " \r\n" + okGet, want: bad, closed: true},
		{name: "NUL before request", raw: "\x00" + okGet, want: bad, closed: true},
		{name: "empty line between pipelined requests", raw: okGet + "\r\n" + okGet, want: []int{200, 200}},
		// Its NUL byte makes it an invalid head whatever follows: 400 at once.
		{name: "TLS ClientHello on plaintext port", raw: "\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03", want: bad, closed: true, wait: 4 * time.Second},
		// A CR not followed by LF is refused as soon as the next byte
		// arrives, even with no LF after it (the inter-byte gap is 5 s).
		{name: "bare CR before the body", raw: "POST /ok HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\rhello", want: bad, closed: true, wait: 4 * time.Second},
		{name: "bare CR in an unfinished field", raw: "GET /ok HTTP/1.1\r\nHost: x\r\nX-A: 1\r2", want: bad, closed: true, wait: 4 * time.Second},

		// RFC 9112 §3: request line.
		{name: "absolute-form http", raw: target("http://x/ok"), want: ok, bodies: []string{"ok\n"}},
		{name: "absolute-form https", raw: target("https://x/ok"), want: ok},
		{name: "absolute-form with port", raw: target("http://x:80/ok"), want: ok},
		{name: "absolute-form uppercase scheme", raw: target("HTTP://x/ok"), want: ok},
		{name: "absolute-form overrides Host", raw: "GET http://y/ok HTTP/1.1\r\nHost: x\r\n\r\n", want: ok},
		{name: "absolute-form without Host field", raw: "GET http://x/ok HTTP/1.1\r\n\r\n", want: bad, closed: true},
		{name: "absolute-form with invalid Host field", raw: "GET http://x/ok HTTP/1.1\r\nHost: a b\r\n\r\n", want: bad, closed: true},
		{name: "absolute-form userinfo", raw: target("http://u:p@x/ok"), want: bad, closed: true},
		{name: "absolute-form ftp scheme", raw: target("ftp://x/ok"), want: bad, closed: true},
		{name: "absolute-form empty authority", raw: target("http:///ok"), want: bad, closed: true},
		{name: "absolute-form opaque", raw: target("http:ok"), want: bad, closed: true},
		{name: "authority-form with GET", raw: target("x:80"), want: bad, closed: true},
		{name: "asterisk-form with GET", raw: target("*"), want: bad, closed: true},
		{name: "asterisk-form with OPTIONS", raw: "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", want: ok, bodies: []string{""}, allow: true},
		// RFC 3986 §2: bytes a URI may not hold are 400, never passed on.
		{name: "backslash in target", raw: target(`/ok\..\x`), want: bad, closed: true},
		{name: "double quote in target", raw: target(`/ok"x`), want: bad, closed: true},
		{name: "braces in target", raw: target("/ok{x}"), want: bad, closed: true},
		{name: "pipe in target", raw: target("/ok?a|b"), want: bad, closed: true},
		{name: "angle brackets in target", raw: target("/ok<x>"), want: bad, closed: true},
		{name: "caret in target", raw: target("/ok^x"), want: bad, closed: true},
		{name: "backtick in target", raw: target("/ok`x"), want: bad, closed: true},
		{name: "square brackets in path", raw: target("/ok[0]"), want: bad, closed: true},
		{name: "vertical tab in target", raw: target("/ok\vx"), want: bad, closed: true},
		{name: "percent-encoded brace in target", raw: target("/ok?a=%7B"), want: ok},
		// RFC 9110 §7.2 and RFC 3986 §3.2.3: port = *DIGIT.
		{name: "Host port not digits", raw: "GET /ok HTTP/1.1\r\nHost: x:8o\r\n\r\n", want: bad, closed: true},
		{name: "Host port with sign", raw: "GET /ok HTTP/1.1\r\nHost: x:+80\r\n\r\n", want: bad, closed: true},
		{name: "Host with two ports", raw: "GET /ok HTTP/1.1\r\nHost: x:80:80\r\n\r\n", want: bad, closed: true},
		{name: "Host IP-literal port not digits", raw: "GET /ok HTTP/1.1\r\nHost: [::1]:x\r\n\r\n", want: bad, closed: true},
		{name: "Host with digit port", raw: "GET /ok HTTP/1.1\r\nHost: x:8080\r\n\r\n", want: ok},
		{name: "Host IP-literal with port", raw: "GET /ok HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", want: ok},
		{name: "CONNECT authority-form", raw: "CONNECT x:443 HTTP/1.1\r\nHost: x:443\r\n\r\n", want: []int{501}, closed: true},
		{name: "CONNECT origin-form", raw: "CONNECT /ok HTTP/1.1\r\nHost: x\r\n\r\n", want: []int{501}, closed: true},
		{name: "two SP after method", raw: "GET  /ok HTTP/1.1\r\nHost: x\r\n\r\n", want: bad, closed: true},
		{name: "two SP before version", raw: "GET /ok  HTTP/1.1\r\nHost: x\r\n\r\n", want: bad, closed: true},
		{name: "trailing SP after version", raw: "GET /ok HTTP/1.1 \r\nHost: x\r\n\r\n", want: bad, closed: true},
		{name: "leading SP before method", raw: " GET /ok HTTP/1.1\r\nHost: x\r\n\r\n", want: bad, closed: true},
		{name: "HTAB separators", raw: "GET\t/ok\tHTTP/1.1\r\nHost: x\r\n\r\n", want: bad, closed: true},
		{name: "HTAB after target", raw: "GET /ok\tHTTP/1.1\r\nHost: x\r\n\r\n", want: bad, closed: true},
		{name: "lowercase version", raw: "GET /ok http/1.1\r\nHost: x\r\n\r\n", want: bad, closed: true},
		{name: "HTTP/2.0", raw: "GET /ok HTTP/2.0\r\nHost: x\r\n\r\n", want: []int{505}, closed: true},
		// RFC 9110 §2.5: a higher minor of HTTP/1 is served as HTTP/1.1.
		{name: "HTTP/1.2", raw: "GET /ok HTTP/1.2\r\nHost: x\r\n\r\n", want: ok, bodies: []string{"ok\n"}},
		{name: "HTTP/1.9 closing", raw: "GET /ok HTTP/1.9\r\nHost: x\r\nConnection: close\r\n\r\n", want: ok, closed: true},
		{name: "HTTP/1.2 without Host", raw: "GET /ok HTTP/1.2\r\n\r\n", want: bad, closed: true},
		{name: "HTTP/0.9 version", raw: "GET /ok HTTP/0.9\r\nHost: x\r\n\r\n", want: []int{505}, closed: true},
		{name: "HTTP/3.0", raw: "GET /ok HTTP/3.0\r\nHost: x\r\n\r\n", want: []int{505}, closed: true},
		{name: "HTTP/1 without minor", raw: "GET /ok HTTP/1\r\nHost: x\r\n\r\n", want: bad, closed: true},
		{name: "HTTP/1.10", raw: "GET /ok HTTP/1.10\r\nHost: x\r\n\r\n", want: bad, closed: true},
		{name: "HTTP/01.1", raw: "GET /ok HTTP/01.1\r\nHost: x\r\n\r\n", want: bad, closed: true},
		{name: "HTTPS/1.1", raw: "GET /ok HTTPS/1.1\r\nHost: x\r\n\r\n", want: bad, closed: true},
		{name: "missing version", raw: "GET /ok\r\nHost: x\r\n\r\n", want: bad, closed: true},
		{name: "HTTP/0.9 simple request", raw: "GET /\r\n\r\n", want: bad, closed: true},
		{name: "method alone", raw: "GET\r\n\r\n", want: bad, closed: true},
		// A request line without a version, then nothing: answered as
		// soon as the line ends, not at the inter-byte gap (5 s, 408).
		{name: "request line without version, then nothing", raw: "GET /\r\n", want: bad, closed: true, wait: 4 * time.Second},
		{name: "method and target, then nothing", raw: "GET /ok\r\n", want: bad, closed: true, wait: 4 * time.Second},
		{name: "method alone, then nothing", raw: "GET\r\n", want: bad, closed: true, wait: 4 * time.Second},
		{name: "lowercase version, then nothing", raw: "GET /ok http/1.1\r\n", want: bad, closed: true, wait: 4 * time.Second},
		// 414 is for the target; a method over the line's limit is 400.
		{name: "method of 8193 bytes", raw: strings.Repeat("G", 8193) + " /ok HTTP/1.1\r\nHost: x\r\n\r\n", want: bad, closed: true},
		{name: "HTTP/2 connection preface", raw: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", want: []int{505}, closed: true},
		{name: "target of 8193 bytes", raw: target("/ok?" + big(8189)), want: []int{414}, closed: true},
		{name: "request line of 8193 bytes", raw: lineOf(8193), want: []int{414}, closed: true},
		{name: "request line of 8192 bytes", raw: lineOf(8192), want: ok},
		{name: "NUL in target", raw: target("/o\x00k"), want: bad, closed: true},
		{name: "CR in target", raw: target("/o\rk"), want: bad, closed: true},
		{name: "LF in target", raw: target("/o\nk"), want: bad, closed: true},
		{name: "DEL in target", raw: target("/o\x7fk"), want: bad, closed: true},
		{name: "byte 0xff in target", raw: target("/o\xffk"), want: bad, closed: true},
		{name: "fragment in target", raw: target("/ok#frag"), want: bad, closed: true},
		{name: "target without slash", raw: target("ok"), want: bad, closed: true},
		{name: "bad percent escape in path", raw: target("/o%zzk"), want: bad, closed: true},
		{name: "encoded CRLF in path", raw: target("/ok%0d%0aX-Injected:%201"), want: []int{404}},

		// RFC 9110 §9: methods. A token the router does not know is 501
		// from the router, not a framing error: the connection stays.
		{name: "unknown token method", raw: "FOO /ok HTTP/1.1\r\nHost: x\r\n\r\n", want: []int{501}},
		{name: "lowercase get", raw: "get /ok HTTP/1.1\r\nHost: x\r\n\r\n", want: []int{501}},
		{name: "WebDAV method", raw: "PROPFIND /ok HTTP/1.1\r\nHost: x\r\n\r\n", want: []int{501}},
		{name: "unknown method with body", raw: "FOO /ok HTTP/1.1\r\nHost: x\r\nContent-Length: 28\r\n\r\n" + smuggledGetA, want: []int{501}},
		{name: "method with parenthesis", raw: "G(T /ok HTTP/1.1\r\nHost: x\r\n\r\n", want: bad, closed: true},
		{name: "method with slash", raw: "GET/ /ok HTTP/1.1\r\nHost: x\r\n\r\n", want: bad, closed: true},
		{name: "method with at sign", raw: "G@T /ok HTTP/1.1\r\nHost: x\r\n\r\n", want: bad, closed: true},
		{name: "method with high byte", raw: "G\xc9T /ok HTTP/1.1\r\nHost: x\r\n\r\n", want: bad, closed: true},
		{name: "method with DEL", raw: "GE\x7fT /ok HTTP/1.1\r\nHost: x\r\n\r\n", want: bad, closed: true},
		{name: "method with NUL", raw: "GE\x00T /ok HTTP/1.1\r\nHost: x\r\n\r\n", want: bad, closed: true},
		{name: "HEAD", raw: "HEAD /ok HTTP/1.1\r\nHost: x\r\n\r\n", want: ok, bodies: []string{""}, method: "HEAD"},
		{name: "POST without body", raw: "POST /ok HTTP/1.1\r\nHost: x\r\n\r\n", want: ok},
		{name: "PUT with body", raw: "PUT /ok HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc", want: ok},
		{name: "DELETE", raw: "DELETE /ok HTTP/1.1\r\nHost: x\r\n\r\n", want: ok},
		{name: "PATCH", raw: "PATCH /ok HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc", want: ok},
		{name: "OPTIONS origin-form", raw: "OPTIONS /ok HTTP/1.1\r\nHost: x\r\n\r\n", want: ok},
		{name: "POST to static root with body", raw: "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 28\r\n\r\n" + smuggledGetA, want: []int{405}},

		// RFC 9112 §5: field syntax.
		{name: "obs-fold with SP", raw: "GET /ok HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n 2\r\n\r\n", want: bad, closed: true},
		{name: "obs-fold with HTAB", raw: "GET /ok HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n\t2\r\n\r\n", want: bad, closed: true},
		{name: "obs-fold hiding Transfer-Encoding", raw: "POST /ok HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", want: bad, closed: true},
		{name: "whitespace before first field line", raw: "GET /ok HTTP/1.1\r\n Host: x\r\n\r\n", want: bad, closed: true},
		{name: "SP before colon", raw: field("X-A : 1"), want: bad, closed: true},
		{name: "HTAB before colon", raw: field("X-A\t: 1"), want: bad, closed: true},
		{name: "empty field name", raw: field(": 1"), want: bad, closed: true},
		{name: "field name with parenthesis", raw: field("X(A): 1"), want: bad, closed: true},
		{name: "field name with SP inside", raw: field("X A: 1"), want: bad, closed: true},
		{name: "field name with at sign", raw: field("X@A: 1"), want: bad, closed: true},
		{name: "field name with high byte", raw: field("X-\xc4: 1"), want: bad, closed: true},
		{name: "field name with DEL", raw: field("X-\x7f: 1"), want: bad, closed: true},
		{name: "field name with NUL", raw: field("X-\x00: 1"), want: bad, closed: true},
		{name: "field line without colon", raw: field("X-A 1"), want: bad, closed: true},
		{name: "bare CR in value", raw: field("X-A: 1\r2"), want: bad, closed: true},
		{name: "NUL in value", raw: field("X-A: 1\x002"), want: bad, closed: true},
		{name: "DEL in value", raw: field("X-A: 1\x7f2"), want: bad, closed: true},
		{name: "SOH in value", raw: field("X-A: 1\x012"), want: bad, closed: true},
		{name: "VT in value", raw: field("X-A: 1\x0b2"), want: bad, closed: true},
		{name: "FF in value", raw: field("X-A: 1\x0c2"), want: bad, closed: true},
		{name: "obs-text in value", raw: field("X-A: caf\xe9"), want: ok},
		{name: "HTAB inside value", raw: field("X-A: 1\t2"), want: ok},
		{name: "empty value", raw: field("X-A:"), want: ok},
		{name: "100 field lines", raw: "GET /ok HTTP/1.1\r\n" + fieldLines(100) + "\r\n", want: ok},
		{name: "101 field lines", raw: "GET /ok HTTP/1.1\r\n" + fieldLines(101) + "\r\n", want: []int{431}, closed: true},
		{name: "header section of 32768 bytes", raw: "GET /ok HTTP/1.1\r\n" + headerSection(32768) + "\r\n", want: ok},
		{name: "header section of 32769 bytes", raw: "GET /ok HTTP/1.1\r\n" + headerSection(32769) + "\r\n", want: []int{431}, closed: true},
		{name: "single field line over 32 KiB", raw: field("X-Big: " + big(33000)), want: []int{431}, closed: true},
		{name: "duplicate Host", raw: "GET /ok HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", want: bad, closed: true},
		{name: "duplicate Host same value", raw: "GET /ok HTTP/1.1\r\nHost: x\r\nHost: x\r\n\r\n", want: bad, closed: true},
		{name: "duplicate Host differing case", raw: "GET /ok HTTP/1.1\r\nHost: x\r\nhOST: y\r\n\r\n", want: bad, closed: true},
		{name: "missing Host in HTTP/1.1", raw: "GET /ok HTTP/1.1\r\n\r\n", want: bad, closed: true},
		{name: "missing Host in HTTP/1.0", raw: "GET /ok HTTP/1.0\r\n\r\n", want: ok, closed: true},
		{name: "Host with SP", raw: "GET /ok HTTP/1.1\r\nHost: a b\r\n\r\n", want: bad, closed: true},
		{name: "Host with HTAB", raw: "GET /ok HTTP/1.1\r\nHost: a\tb\r\n\r\n", want: bad, closed: true},
		{name: "Host with slash", raw: "GET /ok HTTP/1.1\r\nHost: x/y\r\n\r\n", want: bad, closed: true},
		{name: "Host with at sign", raw: "GET /ok HTTP/1.1\r\nHost: u@x\r\n\r\n", want: bad, closed: true},
		// RFC 9110 §4.2.1: an http URI's host is never empty.
		{name: "Host empty", raw: "GET /ok HTTP/1.1\r\nHost:\r\n\r\n", want: bad, closed: true},
		{name: "Host blank", raw: "GET /ok HTTP/1.1\r\nHost: \t \r\n\r\n", want: bad, closed: true},
		{name: "Host port only", raw: "GET /ok HTTP/1.1\r\nHost: :80\r\n\r\n", want: bad, closed: true},
		{name: "Host empty in HTTP/1.0", raw: "GET /ok HTTP/1.0\r\nHost:\r\n\r\n", want: bad, closed: true},
		{name: "Host IPv6 literal", raw: "GET /ok HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", want: ok},
		{name: "Host with surrounding OWS", raw: "GET /ok HTTP/1.1\r\nHost: \t x \t\r\n\r\n", want: ok},

		// RFC 9112 §6.2, RFC 9110 §8.6: Content-Length.
		{name: "CL body holding a request", raw: clPost(smuggledGetA), want: ok, bodies: []string{"ok\n"}},
		{name: "CL 0", raw: cl("0", ""), want: ok},
		{name: "CL on GET holding a request", raw: "GET /ok HTTP/1.1\r\nHost: x\r\nContent-Length: 28\r\n\r\n" + smuggledGetA, want: ok, bodies: []string{"ok\n"}},
		{name: "CL with plus sign", raw: cl("+5", "hello"), want: bad, closed: true},
		{name: "CL negative", raw: cl("-1", ""), want: bad, closed: true},
		{name: "CL negative zero", raw: cl("-0", ""), want: bad, closed: true},
		{name: "CL hex", raw: cl("0x5", "hello"), want: bad, closed: true},
		{name: "CL with letter", raw: cl("5a", "hello"), want: bad, closed: true},
		{name: "CL exponent", raw: cl("1e1", "helloworld"), want: bad, closed: true},
		{name: "CL inner SP", raw: cl("1 0", "helloworld"), want: bad, closed: true},
		{name: "CL leading OWS", raw: post("Content-Length:   5\r\n", "hello"), want: ok},
		{name: "CL trailing OWS", raw: post("Content-Length: 5  \r\n", "hello"), want: ok},
		{name: "CL HTAB around", raw: post("Content-Length:\t5\t\r\n", "hello"), want: ok},
		{name: "CL empty", raw: cl("", "hello"), want: bad, closed: true},
		{name: "CL two equal lines", raw: post("Content-Length: 5\r\nContent-Length: 5\r\n", "hello"), want: ok},
		{name: "CL two differing lines", raw: post("Content-Length: 5\r\nContent-Length: 6\r\n", "hello!"), want: bad, closed: true},
		{name: "CL two differing lines, name case", raw: post("Content-Length: 5\r\ncontent-length: 28\r\n", smuggledGetA), want: bad, closed: true},
		{name: "CL list of equal values", raw: cl("5, 5", "hello"), want: ok},
		{name: "CL list of differing values", raw: cl("5, 6", "hello!"), want: bad, closed: true},
		{name: "CL list with empty element", raw: cl("5,", "hello"), want: bad, closed: true},
		{name: "CL leading zeros", raw: cl("0005", "hello"), want: ok},
		{name: "CL 05 and 5", raw: post("Content-Length: 05\r\nContent-Length: 5\r\n", "hello"), want: ok},
		{name: "CL 2^63-1", raw: cl("9223372036854775807", ""), want: []int{413}, closed: true},
		{name: "CL 2^63", raw: cl("9223372036854775808", ""), want: bad, closed: true},
		{name: "CL of 30 digits", raw: cl(strings.Repeat("9", 30), ""), want: bad, closed: true},
		{name: "CL over max_body_bytes", raw: cl("1048577", ""), want: []int{413}, closed: true},
		{name: "CL Arabic-Indic digit", raw: cl("\u0665", "hello"), want: bad, closed: true},
		{name: "CL SP before colon", raw: post("Content-Length : 5\r\n", "hello"), want: bad, closed: true},
		{name: "CL lowercase name", raw: post("content-length: 5\r\n", "hello"), want: ok},
		{name: "CL larger than the body sent", raw: cl("10", "hello"), want: []int{408}, closed: true, wait: 20 * time.Second},
		{name: "CL body of 256 KiB is drained", raw: clPost(big(256 << 10)), want: ok},
		{name: "CL body of 300 KiB", raw: clPost(big(300 << 10)), want: ok},
		{name: "CL body of max_body_bytes", raw: clPost(big(1 << 20)), want: ok},
		{name: "chunked body over max_body_bytes", raw: chunked(fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", 1<<20+1, big(1<<20+1))), want: []int{413}, closed: true},
		{name: "idle 6 s on a kept connection", raw: clPost("hello"), want: ok, idle: 6 * time.Second},
		{name: "HEAD with CL over max_body_bytes", raw: "HEAD /ok HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\n", want: []int{413}, closed: true, method: "HEAD"},
		{name: "static GET with CL body holding a request", raw: "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 28\r\n\r\n" + smuggledGetA, want: ok, bodies: []string{"<h1>hello</h1>\n"}},
		{name: "static GET with chunked body holding a request", raw: "GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1c\r\n" + smuggledGetA + "\r\n0\r\n\r\n", want: ok, bodies: []string{"<h1>hello</h1>\n"}},
		{name: "static GET with malformed chunked body", raw: "GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5 \r\nhello\r\n0\r\n\r\n", want: ok, closed: true, lateClose: true},
		{name: "static GET with chunked body over 256 KiB", raw: fmt.Sprintf("GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", 300<<10, big(300<<10)), want: ok, closed: true, lateClose: true},
		{name: "HTTP/1.0 POST without length has no body", raw: "POST /ok HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" + smuggledGetA, want: []int{200, 200}, bodies: []string{"ok\n", "A"}},
		{name: "HEAD with CL body", raw: "HEAD /ok HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", want: ok, method: "HEAD"},

		// RFC 9112 §6.1, §6.3: Transfer-Encoding, and Kettle's CL.TE,
		// TE.CL and TE.TE obfuscations.
		{name: "CL.TE", raw: post("Content-Length: 6\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\nG"), want: bad, closed: true},
		{name: "TE.CL", raw: post("Transfer-Encoding: chunked\r\nContent-Length: 3\r\n", "8\r\nSMUGGLED\r\n0\r\n\r\n"), want: bad, closed: true},
		{name: "TE with CL 0", raw: post("Transfer-Encoding: chunked\r\nContent-Length: 0\r\n", "0\r\n\r\n"), want: bad, closed: true},
		{name: "CL with TE xchunked", raw: post("Content-Length: 4\r\nTransfer-Encoding: xchunked\r\n", "0\r\n\r\n"), want: bad, closed: true},
		{name: "CL with TE after HTAB", raw: post("Content-Length: 4\r\nTransfer-Encoding:\tchunked\r\n", "0\r\n\r\n"), want: bad, closed: true},
		{name: "CL with lowercase TE name", raw: post("Content-Length: 4\r\ntransfer-encoding: chunked\r\n", "0\r\n\r\n"), want: bad, closed: true},
		{name: "TE chunked", raw: chunked("5\r\nhello\r\n0\r\n\r\n"), want: ok},
		{name: "TE after HTAB", raw: post("Transfer-Encoding:\tchunked\r\n", "0\r\n\r\n"), want: ok},
		{name: "TE with extra leading SP", raw: post("Transfer-Encoding:  chunked\r\n", "0\r\n\r\n"), want: ok},
		{name: "TE with trailing SP", raw: post("Transfer-Encoding: chunked \r\n", "0\r\n\r\n"), want: ok},
		{name: "TE with trailing HTAB", raw: post("Transfer-Encoding: chunked\t\r\n", "0\r\n\r\n"), want: ok},
		{name: "TE uppercase", raw: te("CHUNKED"), want: ok},
		{name: "TE capitalized", raw: te("Chunked"), want: ok},
		{name: "TE SP before colon", raw: post("Transfer-Encoding : chunked\r\n", "0\r\n\r\n"), want: bad, closed: true},
		{name: "TE HTAB before colon", raw: post("Transfer-Encoding\t: chunked\r\n", "0\r\n\r\n"), want: bad, closed: true},
		{name: "TE after VT", raw: post("Transfer-Encoding:\x0bchunked\r\n", "0\r\n\r\n"), want: bad, closed: true},
		{name: "TE value with bare CR", raw: post("Transfer-Encoding: chunked\r\r\n", "0\r\n\r\n"), want: bad, closed: true},
		{name: "TE value with NUL", raw: post("Transfer-Encoding: chu\x00nked\r\n", "0\r\n\r\n"), want: bad, closed: true},
		{name: "TE value on folded line", raw: post("Transfer-Encoding:\r\n chunked\r\n", "0\r\n\r\n"), want: bad, closed: true},
		{name: "TE hidden behind bare LF", raw: post("X-A: 1\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n"), want: bad, closed: true},
		{name: "TE name without colon line", raw: post("Transfer-Encoding\r\n: chunked\r\n", "0\r\n\r\n"), want: bad, closed: true},
		{name: "TE gzip, chunked", raw: te("gzip, chunked"), want: []int{501}, closed: true},
		{name: "TE identity, chunked", raw: te("identity, chunked"), want: []int{501}, closed: true},
		{name: "TE chunked, chunked", raw: te("chunked, chunked"), want: []int{501}, closed: true},
		{name: "TE two chunked fields", raw: post("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n"), want: []int{501}, closed: true},
		{name: "TE gzip field then chunked field", raw: post("Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n"), want: []int{501}, closed: true},
		{name: "TE chunked with parameter", raw: te("chunked;q=1"), want: []int{501}, closed: true},
		{name: "TE leading empty element", raw: te(", chunked"), want: []int{501}, closed: true},
		{name: "TE trailing empty element", raw: te("chunked,"), want: []int{501}, closed: true},
		{name: "TE in HTTP/1.0", raw: "POST /ok HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", want: bad, closed: true},
		{name: "TE in HTTP/1.0 keep-alive", raw: "POST /ok HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", want: bad, closed: true},
		{name: "TE name with underscore is not TE", raw: post("Transfer_Encoding: chunked\r\n", "0\r\n\r\n"), want: []int{200, 400}, closed: true},
		{name: "TE chunked on GET", raw: "GET /ok HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", want: ok},
		{name: "TE chunked on HEAD", raw: "HEAD /ok HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", want: ok, method: "HEAD"},

		// RFC 9112 §7.1: chunk-size, chunk-ext and trailer tricks. The
		// respond route reads the body, so the transport's 400 replaces
		// its answer.
		{name: "chunk-size 0x5", raw: chunked("0x5\r\nhello\r\n0\r\n\r\n"), want: bad, closed: true},
		{name: "chunk-size +5", raw: chunked("+5\r\nhello\r\n0\r\n\r\n"), want: bad, closed: true},
		{name: "chunk-size -5", raw: chunked("-5\r\nhello\r\n0\r\n\r\n"), want: bad, closed: true},
		{name: "chunk-size leading SP", raw: chunked(" 5\r\nhello\r\n0\r\n\r\n"), want: bad, closed: true},
		{name: "chunk-size trailing SP", raw: chunked("5 \r\nhello\r\n0\r\n\r\n"), want: bad, closed: true},
		{name: "chunk-size trailing HTAB", raw: chunked("5\t\r\nhello\r\n0\r\n\r\n"), want: bad, closed: true},
		{name: "chunk-ext BWS before semicolon", raw: chunked("5 ;a=b\r\nhello\r\n0\r\n\r\n"), want: bad, closed: true},
		{name: "chunk-ext BWS before equals", raw: chunked("5;a =b\r\nhello\r\n0\r\n\r\n"), want: bad, closed: true},
		{name: "chunk-ext BWS after equals", raw: chunked("5;a= b\r\nhello\r\n0\r\n\r\n"), want: bad, closed: true},
		{name: "chunk-ext without name", raw: chunked("5;\r\nhello\r\n0\r\n\r\n"), want: bad, closed: true},
		{name: "chunk-ext without value", raw: chunked("5;a=\r\nhello\r\n0\r\n\r\n"), want: bad, closed: true},
		{name: "chunk-ext unterminated quote", raw: chunked("5;a=\"b\r\nhello\r\n0\r\n\r\n"), want: bad, closed: true},
		{name: "chunk-ext junk after quoted value", raw: chunked("5;a=\"b\"c\r\nhello\r\n0\r\n\r\n"), want: bad, closed: true},
		{name: "chunk-ext NUL in quoted value", raw: chunked("5;a=\"b\x00\"\r\nhello\r\n0\r\n\r\n"), want: bad, closed: true},
		{name: "chunk-ext DEL in quoted value", raw: chunked("5;a=\"b\x7f\"\r\nhello\r\n0\r\n\r\n"), want: bad, closed: true},
		{name: "chunk-ext comma", raw: chunked("5;a=b,c\r\nhello\r\n0\r\n\r\n"), want: bad, closed: true},
		{name: "chunk-ext line over 4096 bytes", raw: chunked("5;a=" + big(5000) + "\r\nhello\r\n0\r\n\r\n"), want: bad, closed: true},
		{name: "chunk-ext overhead over 16 KiB", raw: chunked(strings.Repeat("1;a="+big(4000)+"\r\nx\r\n", 6) + "0\r\n\r\n"), want: bad, closed: true},
		{name: "chunk-size of 17 hex digits", raw: chunked("00000000000000005\r\nhello\r\n0\r\n\r\n"), want: bad, closed: true},
		{name: "chunk-size over 2^63-1", raw: chunked("8000000000000000\r\nhello\r\n0\r\n\r\n"), want: bad, closed: true},
		{name: "chunk-size of 16 f", raw: chunked("ffffffffffffffff\r\nhello\r\n0\r\n\r\n"), want: bad, closed: true},
		{name: "chunk-size empty", raw: chunked("\r\nhello\r\n0\r\n\r\n"), want: bad, closed: true},
		{name: "chunk-size with underscore", raw: chunked("0_5\r\nhello\r\n0\r\n\r\n"), want: bad, closed: true},
		{name: "chunk-size with NUL", raw: chunked("5\x00\r\nhello\r\n0\r\n\r\n"), want: bad, closed: true},
		{name: "chunk-size bare LF", raw: chunked("5\nhello\r\n0\r\n\r\n"), want: bad, closed: true},
		{name: "chunk-data bare LF", raw: chunked("5\r\nhello\n0\r\n\r\n"), want: bad, closed: true},
		{name: "chunk-data without CRLF", raw: chunked("5\r\nhello0\r\n\r\n"), want: bad, closed: true},
		{name: "chunk-data longer than size", raw: chunked("3\r\nhello\r\n0\r\n\r\n"), want: bad, closed: true},
		{name: "chunk-data shorter than size", raw: chunked("8\r\nhello\r\n0\r\n\r\n"), want: bad, closed: true},
		{name: "last-chunk ended by bare LF", raw: chunked("0\r\n\n"), want: bad, closed: true},
		{name: "last-chunk without final CRLF, then a request", raw: chunked("0\r\n" + smuggledGetA), want: bad, closed: true},
		{name: "missing last-chunk, then a request", raw: chunked("5\r\nhello\r\n" + smuggledGetA), want: bad, closed: true},
		{name: "trailer Content-Length", raw: chunked("0\r\nContent-Length: 28\r\n\r\n" + smuggledGetA), want: bad, closed: true},
		{name: "trailer Transfer-Encoding", raw: chunked("0\r\nTransfer-Encoding: chunked\r\n\r\n"), want: bad, closed: true},
		{name: "trailer Host", raw: chunked("0\r\nHost: y\r\n\r\n"), want: bad, closed: true},
		{name: "trailer Connection", raw: chunked("0\r\nConnection: close\r\n\r\n"), want: bad, closed: true},
		{name: "trailer Trailer", raw: chunked("0\r\nTrailer: X-A\r\n\r\n"), want: bad, closed: true},
		{name: "trailer obs-fold", raw: chunked("0\r\nX-A: 1\r\n 2\r\n\r\n"), want: bad, closed: true},
		{name: "trailer bare CR in value", raw: chunked("0\r\nX-A: 1\r2\r\n\r\n"), want: bad, closed: true},
		{name: "trailer SP before colon", raw: chunked("0\r\nX-A : 1\r\n\r\n"), want: bad, closed: true},

		// Valid chunked forms: the body is drained exactly and the
		// connection stays in sync.
		{name: "chunk-size uppercase hex", raw: chunked("A\r\n0123456789\r\n0\r\n\r\n"), want: ok},
		{name: "chunk-size lowercase hex", raw: chunked("a\r\n0123456789\r\n0\r\n\r\n"), want: ok},
		{name: "chunk-size leading zeros", raw: chunked("0005\r\nhello\r\n0\r\n\r\n"), want: ok},
		{name: "chunk-size of 16 digits", raw: chunked("0000000000000005\r\nhello\r\n0\r\n\r\n"), want: ok},
		{name: "last-chunk 000", raw: chunked("5\r\nhello\r\n000\r\n\r\n"), want: ok},
		{name: "chunk-ext token", raw: chunked("5;a=b\r\nhello\r\n0;c=d\r\n\r\n"), want: ok},
		{name: "chunk-ext quoted", raw: chunked("5;a=\"x y\"\r\nhello\r\n0\r\n\r\n"), want: ok},
		{name: "chunk-ext quoted-pair", raw: chunked("5;a=\"x\\\"y\"\r\nhello\r\n0\r\n\r\n"), want: ok},
		{name: "chunk-ext several", raw: chunked("5;a;b=c;d=\"e\"\r\nhello\r\n0\r\n\r\n"), want: ok},
		{name: "valid trailer", raw: chunked("5\r\nhello\r\n0\r\nX-Checksum: 1\r\n\r\n"), want: ok},
		{name: "Trailer field announcing Content-Length", raw: post("Transfer-Encoding: chunked\r\nTrailer: Content-Length\r\n", "5\r\nhello\r\n0\r\nX-A: 1\r\n\r\n"), want: ok},
		{name: "many chunks", raw: chunked(strings.Repeat("1\r\nx\r\n", 100) + "0\r\n\r\n"), want: ok},
		{name: "chunk-data holding a request", raw: chunked("1c\r\n" + smuggledGetA + "\r\n0\r\n\r\n"), want: ok, bodies: []string{"ok\n"}},
		{name: "chunk-data holding a chunk", raw: chunked("6\r\n0\r\n\r\nX\r\n0\r\n\r\n"), want: ok},

		// RFC 9112 §9.3: persistence.
		{name: "HTTP/1.0 without keep-alive", raw: "GET /ok HTTP/1.0\r\n\r\n", want: ok, closed: true},
		{name: "HTTP/1.0 with keep-alive", raw: "GET /ok HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", want: ok},
		{name: "HTTP/1.0 with Keep-Alive capitalized", raw: "GET /ok HTTP/1.0\r\nHost: x\r\nConnection: Keep-Alive\r\n\r\n", want: ok},
		{name: "HTTP/1.0 keep-alive, close", raw: "GET /ok HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n", want: ok, closed: true},
		{name: "HTTP/1.0 keep-alive with CL body", raw: "POST /ok HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 28\r\n\r\n" + smuggledGetA, want: ok, bodies: []string{"ok\n"}},
		{name: "HTTP/1.0 not kept, pipelined request unanswered", raw: "GET /ok HTTP/1.0\r\n\r\n" + okGet, want: ok, closed: true},
		{name: "Connection: close", raw: field("Connection: close"), want: ok, closed: true},
		{name: "Connection: CLOSE", raw: field("Connection: CLOSE"), want: ok, closed: true},
		{name: "Connection: keep-alive, close", raw: field("Connection: keep-alive, close"), want: ok, closed: true},
		{name: "Connection: ,close", raw: field("Connection: ,close"), want: ok, closed: true},
		{name: "Connection close in second field", raw: field("Connection: keep-alive\r\nConnection: close"), want: ok, closed: true},
		{name: "Connection: closed is not close", raw: field("Connection: closed"), want: ok},
		{name: "Connection: keep-alive on HTTP/1.1", raw: field("Connection: keep-alive"), want: ok},
		{name: "Connection close, pipelined request unanswered", raw: field("Connection: close") + okGet, want: ok, closed: true},
		{name: "HTTP/1.0 kept, then not kept", raw: "GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /b HTTP/1.0\r\n\r\n" + okGet, want: []int{200, 200}, bodies: []string{"A", "B"}, closed: true},
		{name: "1000 requests then close", raw: strings.Repeat(okGet, 1000), want: statuses(1000, 200), closed: true},
		{name: "1001st request unanswered", raw: strings.Repeat(okGet, 1001), want: statuses(1000, 200), closed: true},

		// Pipelining (RFC 9112 §9.3.2).
		{name: "three pipelined", raw: target("/a") + target("/b") + target("/c"), want: []int{200, 200, 200}, bodies: []string{"A", "B", "C"}},
		{name: "ten pipelined across dispatches", raw: strings.Repeat(target("/a")+target("/b"), 5), want: statuses(10, 200), bodies: strings.Split("ABABABABAB", "")},
		{name: "pipelined CL body then GET", raw: clPost(smuggledGetA) + target("/b"), want: []int{200, 200}, bodies: []string{"ok\n", "B"}},
		{name: "pipelined chunked body then GET", raw: chunked("1c\r\n"+smuggledGetA+"\r\n0\r\n\r\n") + target("/c"), want: []int{200, 200}, bodies: []string{"ok\n", "C"}},
		{name: "twenty pipelined with bodies", raw: strings.Repeat(clPost("hello")+chunked("5\r\nhello\r\n0\r\n\r\n"), 10), want: statuses(20, 200)},
		{name: "five empty lines between pipelined requests", raw: okGet + strings.Repeat("\r\n", 5) + okGet, want: []int{200, 400}, closed: true},
		{name: "pipelined valid then garbage", raw: okGet + "garbage\r\n\r\n", want: []int{200, 400}, closed: true},
		{name: "pipelined valid then a line without version", raw: okGet + "GET /\r\n", want: []int{200, 400}, closed: true, wait: 4 * time.Second},
		{name: "pipelined valid then HTTP/2.0", raw: okGet + "GET /ok HTTP/2.0\r\nHost: x\r\n\r\n", want: []int{200, 505}, closed: true},
		{name: "pipelined valid, bad, valid", raw: okGet + "GET /ok HTTP/1.1\r\nHost: x\r\nX-A : 1\r\n\r\n" + okGet, want: []int{200, 400}, closed: true},
		{name: "pipelined valid then partial head", raw: okGet + "GET /ok HTTP/1.1\r\nHost: x\r\n", want: []int{200, 408}, closed: true},
		{name: "partial head", raw: "GET /ok HTTP/1.1\r\nHost: x\r\n", want: []int{408}, closed: true},
		{name: "pipelined 413 then request unanswered", raw: cl("2000000", "") + okGet, want: []int{413}, closed: true},

		// RFC 9110 §10.1.1: Expect.
		{name: "Expect 100-continue without body", raw: field("Expect: 100-continue"), want: ok},
		{name: "Expect 100-continue with CL 0", raw: post("Expect: 100-continue\r\nContent-Length: 0\r\n", ""), want: ok},
		{name: "Expect 100-continue with CL body", raw: post("Expect: 100-continue\r\nContent-Length: 28\r\n", smuggledGetA), want: []int{100, 200}, bodies: []string{"ok\n"}},
		{name: "Expect 100-continue with chunked body", raw: post("Expect: 100-continue\r\nTransfer-Encoding: chunked\r\n", "5\r\nhello\r\n0\r\n\r\n"), want: []int{100, 200}},
		{name: "Expect 100-continue with malformed chunked body", raw: post("Expect: 100-continue\r\nTransfer-Encoding: chunked\r\n", "5 \r\nhello\r\n0\r\n\r\n"), want: []int{100, 400}, closed: true},
		{name: "Expect 100-Continue mixed case", raw: field("Expect: 100-Continue"), want: ok},
		{name: "Expect something-else", raw: field("Expect: something-else"), want: []int{417}, closed: true},
		{name: "Expect list with unknown element", raw: field("Expect: 100-continue, foo"), want: []int{417}, closed: true},
		{name: "Expect empty", raw: field("Expect:"), want: []int{417}, closed: true},
		{name: "Expect in HTTP/1.0 is ignored", raw: "POST /ok HTTP/1.0\r\nConnection: keep-alive\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\nhello", want: ok},
		{name: "Expect with CL over max_body_bytes", raw: post("Expect: 100-continue\r\nContent-Length: 2000000\r\n", ""), want: []int{413}, closed: true},
		{name: "pipelined valid then Expect something-else", raw: okGet + field("Expect: nope"), want: []int{200, 417}, closed: true},

		// Upgrades are not performed: the request is answered as HTTP/1.1
		// and the connection stays HTTP/1.1 (h2c smuggling).
		{name: "Upgrade h2c", raw: field("Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA"), want: ok},
		{name: "Upgrade websocket", raw: field("Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="), want: ok},
	}
}

// smugglingRFCCases pin three rules that earlier versions of the server
// broke: a non-final chunked coding, an empty line after a request, and a
// response that must announce the close of a body it will not read.
func smugglingRFCCases() []smuggleCase {
	ok := []int{200}
	bad := []int{400}
	return []smuggleCase{
		// RFC 9112 §6.3 rule 4: "If a Transfer-Encoding header field is
		// present in a request and the chunked transfer coding is not the
		// final encoding, ... the server MUST respond with the 400 (Bad
		// Request) status code and then close the connection." 501 is for
		// chunked final after an unknown coding (§6.1).
		{name: "TE xchunked", raw: te("xchunked"), want: bad, closed: true},
		{name: "TE identity", raw: te("identity"), want: bad, closed: true},
		{name: "TE chunked, identity", raw: te("chunked, identity"), want: bad, closed: true},
		{name: "TE gzip", raw: te("gzip"), want: bad, closed: true},
		{name: "TE chunk", raw: te("chunk"), want: bad, closed: true},
		{name: "TE quoted chunked", raw: te(`"chunked"`), want: bad, closed: true},
		{name: "TE empty", raw: post("Transfer-Encoding:\r\n", "0\r\n\r\n"), want: bad, closed: true},
		{name: "TE chunked field then x field", raw: post("Transfer-Encoding: chunked\r\nTransfer-encoding: x\r\n", "0\r\n\r\n"), want: bad, closed: true},

		// RFC 9112 §2.2: a server SHOULD ignore an empty line before a
		// request line. One left after a request must not start a head
		// that then times out with 408: the connection is parked as idle.
		{name: "CRLF after body, then idle", raw: clPost("hello") + "\r\n", want: ok, idle: 6 * time.Second},

		// RFC 9110 §10.1.1: "A server that responds with a final status code
		// before reading the entire request content SHOULD indicate whether
		// it intends to close the connection ... or continue reading the
		// request content." In both cases the server knows before its
		// response that it will not read the body (100 Continue was never
		// sent; the Content-Length exceeds the 256 KiB drain cap), so the
		// response says Connection: close.
		{name: "Expect 100-continue with body on static route", raw: "GET / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\nhello", want: ok, closed: true},
		{name: "static GET with CL body over 256 KiB", raw: fmt.Sprintf("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", 300<<10, strings.Repeat("a", 300<<10)), want: ok, closed: true},
	}
}

func TestSmuggling(t *testing.T) {
	h := start(t, `
workers {
  count       = 4
  concurrency = 16
}
`)
	// At most share (pool/4 = 16) connections from 127.0.0.1 at a time, so
	// no case waits for a worker slot.
	sem := make(chan struct{}, 16)
	cases := append(smugglingCases(), smugglingRFCCases()...)
	t.Run("cases", func(t *testing.T) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				sem <- struct{}{}
				defer func() { <-sem }()
				if err := runSmuggleCase(t, h.addr, tc); err != nil {
					t.Error(err)
				}
			})
		}
	})
	t.Logf("%d cases", len(cases))
}

// runSmuggleCase sends tc.raw on a new connection from 127.0.0.1 and checks
// the responses, the X-Content-Type-Options field of each, and whether the
// connection is closed or stays open and in sync.
func runSmuggleCase(t *testing.T, addr string, tc smuggleCase) error {
	c := dialFrom(t, "127.0.0.1", addr)
	defer c.Close()
	wrote := make(chan error, 1)
	go func() {
		// A write of its own: the server may answer and close before
		// reading all of a large request.
		c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		_, err := c.Write([]byte(tc.raw))
		wrote <- err
	}()
	br := bufio.NewReader(c)
	method := tc.method
	if method == "" {
		method = http.MethodGet
	}

	wait := tc.wait
	if wait == 0 {
		wait = 10 * time.Second
	}
	var problems []string
	var got []int
	var readErr error
	final := 0 // final (non-1xx) responses read
	for i := range tc.want {
		c.SetReadDeadline(time.Now().Add(wait))
		resp, body, err := readResponse(br, method)
		if err != nil {
			readErr = fmt.Errorf("reading response %d: %v", i+1, err)
			break
		}
		got = append(got, resp.StatusCode)
		if resp.StatusCode < 200 {
			continue // interim: no fields to check
		}
		if _, err := http.ParseTime(resp.Header.Get("Date")); err != nil {
			problems = append(problems, fmt.Sprintf("response %d (%d): Date %q: %v", i+1, resp.StatusCode, resp.Header.Get("Date"), err))
		}
		if v := resp.Header.Get("X-Content-Type-Options"); v != "nosniff" {
			problems = append(problems, fmt.Sprintf("response %d (%d): X-Content-Type-Options %q, want nosniff", i+1, resp.StatusCode, v))
		}
		if tc.allow && !strings.Contains(resp.Header.Get("Allow"), "GET") {
			problems = append(problems, fmt.Sprintf("response %d (%d): Allow %q, want the served methods", i+1, resp.StatusCode, resp.Header.Get("Allow")))
		}
		if tc.bodies != nil && final < len(tc.bodies) && body != tc.bodies[final] {
			problems = append(problems, fmt.Sprintf("response %d: body %q, want %q", i+1, excerptString([]byte(body)), tc.bodies[final]))
		}
		final++
		last := i == len(tc.want)-1
		switch {
		case resp.Close && (!last || !tc.closed):
			problems = append(problems, fmt.Sprintf("response %d (%d) announces Connection: close, but the connection must stay open", i+1, resp.StatusCode))
		case !resp.Close && last && tc.closed && !tc.lateClose:
			problems = append(problems, fmt.Sprintf("response %d (%d) is the last before the close but does not announce it (Connection %q)", i+1, resp.StatusCode, resp.Header.Get("Connection")))
		}
	}
	if !equalInts(got, tc.want) || readErr != nil {
		msg := fmt.Sprintf("statuses %s, want %s", summarize(got), summarize(tc.want))
		if readErr != nil {
			msg += ": " + readErr.Error()
		}
		return errors.New(strings.Join(append([]string{msg}, problems...), "; "))
	}

	if tc.closed {
		if err := expectEOF(c, br, wait); err != nil {
			problems = append(problems, err.Error())
		}
	} else {
		if err := <-wrote; err != nil {
			problems = append(problems, fmt.Sprintf("writing the request: %v", err))
		} else if err := followUp(c, br, tc.idle); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// expectEOF checks that nothing but the end of the connection follows the
// responses already read: it is expectClosed that also refuses extra bytes,
// since an unexpected response after the expected ones is itself a desync.
func expectEOF(c net.Conn, br *bufio.Reader, limit time.Duration) error {
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		return fmt.Errorf("%d unexpected bytes after the last response: %q", n, excerptString(b))
	}
	c.SetReadDeadline(time.Now().Add(limit))
	var b [512]byte
	n, err := c.Read(b[:])
	if n > 0 {
		return fmt.Errorf("unexpected bytes after the last response: %q", excerptString(b[:n]))
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("connection still open %v after the last response", limit)
	}
	return nil
}

// followUp proves that a connection is open and in sync: after idle, a
// GET /ok gets 200 "ok\n", kept alive, and no other bytes arrive.
func followUp(c net.Conn, br *bufio.Reader, idle time.Duration) error {
	if idle > 0 {
		time.Sleep(idle)
	}
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		return fmt.Errorf("%d unexpected bytes before the follow-up request: %q", n, excerptString(b))
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(okGet)); err != nil {
		return fmt.Errorf("writing the follow-up request: %v", err)
	}
	resp, body, err := readResponse(br, http.MethodGet)
	if err != nil {
		return fmt.Errorf("follow-up request: %v", err)
	}
	if resp.StatusCode != 200 || body != "ok\n" {
		return fmt.Errorf("follow-up request: status %d body %q, want 200 \"ok\\n\"", resp.StatusCode, excerptString([]byte(body)))
	}
	if resp.Close {
		return fmt.Errorf("follow-up response announces Connection: close")
	}
	if v := resp.Header.Get("X-Content-Type-Options"); v != "nosniff" {
		return fmt.Errorf("follow-up response: X-Content-Type-Options %q", v)
	}
	c.SetReadDeadline(time.Now().Add(150 * time.Millisecond))
	if b, err := br.Peek(1); len(b) > 0 {
		n := br.Buffered()
		rest, _ := br.Peek(n)
		return fmt.Errorf("unexpected bytes after the follow-up response: %q", excerptString(rest))
	} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		return fmt.Errorf("connection closed after the follow-up response: %v", err)
	}
	return nil
}

// summarize prints a status list, runs of one status shortened ("1000×200").
func summarize(s []int) string {
	var parts []string
	for i := 0; i < len(s); {
		j := i
		for j < len(s) && s[j] == s[i] {
			j++
		}
		if j-i > 3 {
			parts = append(parts, fmt.Sprintf("%d×%d", j-i, s[i]))
		} else {
			for k := i; k < j; k++ {
				parts = append(parts, fmt.Sprint(s[k]))
			}
		}
		i = j
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// excerptString shortens b for a failure message.
func excerptString(b []byte) string {
	if len(b) > 120 {
		return string(b[:120]) + "…"
	}
	return string(b)
}
