package httphead

import (
	"bytes"
	"fmt"
	"net/url"
	"strings"
)

// parseRequestLine parses and validates the request line (RFC 9112 §3)
// and fills h's Method, Target, URL, Proto, ProtoMajor and ProtoMinor, and
// Host for absolute-form.
//
//	request-line = method SP request-target SP HTTP-version
func (h *Head) parseRequestLine(line []byte) *Error {
	content, e := lineContent(line)
	if e != nil {
		return e
	}
	// RFC 9112 §3 lets a recipient split on any whitespace; a front end
	// must not, because the application behind it might split
	// differently. Exactly two SPs and no HTAB.
	if bytes.IndexByte(content, '\t') >= 0 {
		return newError(CodeMalformedRequestLine, "HTAB in request line")
	}
	sp1 := bytes.IndexByte(content, ' ')
	if sp1 < 0 {
		return newError(CodeMalformedRequestLine, fmt.Sprintf("request line %q has no SP", excerpt(content, 40)))
	}
	sp2 := bytes.IndexByte(content[sp1+1:], ' ')
	if sp2 < 0 {
		return newError(CodeMalformedRequestLine, "request line has one SP")
	}
	sp2 += sp1 + 1
	method, target, version := content[:sp1], content[sp1+1:sp2], content[sp2+1:]
	if len(method) == 0 || len(target) == 0 || len(version) == 0 || bytes.IndexByte(version, ' ') >= 0 {
		return newError(CodeMalformedRequestLine, "request line is not method SP target SP version")
	}
	if !isToken(method) {
		return newError(CodeInvalidMethod, fmt.Sprintf("method %q is not a token", excerpt(method, 20)))
	}
	major, minor, e := parseVersion(version)
	if e != nil {
		return e
	}
	// CONNECT asks for a tunnel (RFC 9110 §9.3.6); gatehouse is not a
	// forward proxy.
	if string(method) == "CONNECT" {
		return newError(CodeConnectRefused, "CONNECT is not supported")
	}
	for i, c := range target {
		// RFC 9112 §3.2: the target is a URI reference, so only the bytes
		// RFC 3986 allows. The others (controls, DEL, bytes >= 0x80, and
		// visible ones such as '\\', '"', '{' or '|') are refused rather
		// than passed on for the application to reinterpret: a backslash
		// read as a path separator behind the front end is a classic
		// access-control bypass.
		if byteClass[c]&classURI == 0 {
			return newError(CodeInvalidTarget, fmt.Sprintf("byte 0x%02x at offset %d of the target", c, i))
		}
	}

	// One allocation for the three strings.
	s := string(content)
	h.Method = s[:sp1]
	h.Target = s[sp1+1 : sp2]
	h.Proto = s[sp2+1:]
	if minor == 1 && h.Proto != "HTTP/1.1" {
		h.Proto = "HTTP/1.1" // served as HTTP/1.1 (parseVersion)
	}
	h.ProtoMajor, h.ProtoMinor = major, minor
	return h.parseTarget()
}

// parseVersion parses HTTP-version (RFC 9112 §2.3):
//
//	HTTP-version = HTTP-name "/" DIGIT "." DIGIT
//	HTTP-name    = %s"HTTP"
//
// HTTP/1.0 and HTTP/1.1 are themselves. A higher 1.x minor is HTTP/1.1:
// RFC 9110 §2.5 says a recipient SHOULD process a message with a minor
// version higher than it implements as if it were in the highest minor
// version it conforms to. Another well-formed major (0.9, 2.0) is 505;
// anything else 400.
func parseVersion(v []byte) (major, minor int, e *Error) {
	if len(v) != 8 || string(v[:5]) != "HTTP/" || v[6] != '.' ||
		v[5] < '0' || v[5] > '9' || v[7] < '0' || v[7] > '9' {
		return 0, 0, newError(CodeInvalidVersion, fmt.Sprintf("malformed HTTP version %q", excerpt(v, 20)))
	}
	major, minor = int(v[5]-'0'), int(v[7]-'0')
	if major != 1 {
		return 0, 0, newError(CodeUnsupportedVersion, fmt.Sprintf("HTTP version %s", v))
	}
	return major, min(minor, 1), nil
}

// parseTarget checks the form of h.Target against h.Method (RFC 9112
// §3.2) and sets h.URL, and h.Host for absolute-form.
func (h *Head) parseTarget() *Error {
	t := h.Target
	if strings.IndexByte(t, '#') >= 0 {
		// A fragment is never sent (RFC 9110 §4.2.1 and §7.1).
		return newError(CodeInvalidTarget, "target has a fragment")
	}
	switch {
	case t == "*":
		// asterisk-form is only for server-wide OPTIONS (RFC 9112 §3.2.4).
		if h.Method != "OPTIONS" {
			return newError(CodeInvalidTarget, "asterisk-form target with a method other than OPTIONS")
		}
		h.URL = &url.URL{Path: "*"}
		return nil
	case t[0] == '/':
		// origin-form (RFC 9112 §3.2.1). '[' and ']' belong to an
		// IP-literal authority only (RFC 3986 §3.2.2), never to a path or
		// query.
		if strings.ContainsAny(t, "[]") {
			return newError(CodeInvalidTarget, "'[' or ']' in an origin-form target")
		}
		u, err := url.ParseRequestURI(t)
		if err != nil {
			return newError(CodeInvalidTarget, "unparsable origin-form target")
		}
		h.URL = u
		return nil
	}
	// absolute-form (RFC 9112 §3.2.2), for http and https only. The
	// authority-form (§3.2.3) is only for CONNECT, refused above.
	u, err := url.ParseRequestURI(t)
	if err != nil {
		return newError(CodeInvalidTarget, "target is neither origin-form nor a parsable absolute URI")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return newError(CodeInvalidTarget, "absolute-form target with a scheme other than http or https")
	}
	if u.Host == "" || u.Opaque != "" {
		return newError(CodeInvalidTarget, "absolute-form target without an authority")
	}
	if u.User != nil {
		// RFC 9110 §4.2.4: userinfo is deprecated and a recipient
		// SHOULD treat it as an error.
		return newError(CodeInvalidTarget, "absolute-form target with userinfo")
	}
	h.URL = u
	h.Host = u.Host
	return nil
}
