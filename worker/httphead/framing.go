package httphead

import (
	"fmt"
	"math"
	"strings"
)

// checkFraming applies the rules that need the whole header section: Host,
// message framing (Content-Length, Transfer-Encoding), Connection and
// Expect. It fills the corresponding fields of h.
func (h *Head) checkFraming() *Error {
	if e := h.checkHost(); e != nil {
		return e
	}

	cls, haveCL := h.Header["Content-Length"]
	if tes, ok := h.Header["Transfer-Encoding"]; ok {
		// RFC 9112 §6.1: an HTTP/1.0 message with Transfer-Encoding must
		// be treated as having faulty framing.
		if h.ProtoMinor == 0 {
			return newError(CodeTEInHTTP10, "Transfer-Encoding in an HTTP/1.0 request")
		}
		// RFC 9112 §6.1: Transfer-Encoding with Content-Length "ought to
		// be handled as an error"; it is the request-smuggling signature
		// (§11.2), so it is one.
		if haveCL {
			return newError(CodeTEAndCL, "both Transfer-Encoding and Content-Length")
		}
		// Like net/http and nginx, only a single field whose value is
		// exactly "chunked" is accepted. RFC 9112 §6.3 rule 4: when
		// chunked is not the final coding the body length cannot be
		// determined: 400. When it is final but preceded by a coding we
		// do not decode ("gzip, chunked", or chunked twice): 501 (§6.1).
		if len(tes) != 1 || !asciiEqualFold(tes[0], "chunked") {
			code := CodeInvalidTransfer
			if finalChunked(tes) {
				code = CodeUnsupportedTransfer
			}
			return newError(code, fmt.Sprintf("transfer coding %q", excerpt([]byte(strings.Join(tes, ", ")), 40)))
		}
		h.Chunked = true
		h.ContentLength = -1
	} else if haveCL {
		n, e := parseContentLength(cls)
		if e != nil {
			return e
		}
		h.ContentLength = n
	}

	for _, v := range h.Header["Connection"] {
		forEachElement(v, func(tok string) {
			switch {
			case asciiEqualFold(tok, "close"):
				h.Close = true
			case asciiEqualFold(tok, "keep-alive"):
				h.KeepAlive = true
			}
		})
	}

	if exp, ok := h.Header["Expect"]; ok {
		for _, v := range exp {
			// RFC 9110 §10.1.1: 100-continue is the only expectation
			// defined; a server MAY answer any other with 417. An empty
			// element is refused as well.
			for elem := range strings.SplitSeq(v, ",") {
				if !asciiEqualFold(trimOWS(elem), "100-continue") {
					return newError(CodeUnsupportedExpect, fmt.Sprintf("expectation %q", excerpt([]byte(elem), 40)))
				}
			}
		}
		// An HTTP/1.0 client cannot handle a 100 response: "A server that
		// receives a 100-continue expectation in an HTTP/1.0 request MUST
		// ignore that expectation."
		h.Expect100 = h.ProtoMinor >= 1
	}
	return nil
}

// checkHost applies RFC 9112 §3.2: "A server MUST respond with a 400 (Bad
// Request) status code to any HTTP/1.1 request message that lacks a Host
// header field and to any request message that contains more than one Host
// header field line or a Host header field with an invalid field value."
func (h *Head) checkHost() *Error {
	hosts := h.Header["Host"]
	switch {
	case len(hosts) > 1:
		return newError(CodeDuplicateHost, fmt.Sprintf("%d Host fields", len(hosts)))
	case len(hosts) == 0:
		if h.ProtoMinor >= 1 {
			return newError(CodeMissingHost, "HTTP/1.1 request without Host")
		}
		return nil
	}
	if !validHost(hosts[0]) {
		return newError(CodeInvalidHost, fmt.Sprintf("invalid Host %q", excerpt([]byte(hosts[0]), 40)))
	}
	if h.Host == "" {
		// For absolute-form Host was set from the target, which wins
		// (RFC 9112 §3.2.2).
		h.Host = hosts[0]
	}
	return nil
}

// validHost reports whether s may be a Host value: uri-host [":" port]
// (RFC 9110 §7.2, RFC 3986 §3.2.2-§3.2.3). It checks the byte set of the
// host (reg-name, IPv4 or IP-literal characters, as net/http's server
// does), that brackets enclose the whole IP-literal, and that the port is
// digits only. The host may not be empty ("", ":80", "[]"): RFC 9110 §4.2.1
// says a recipient MUST reject an http URI with an empty host as invalid,
// and gatehouse serves http and https only. nginx refuses it too; an empty
// Host would otherwise reach an upstream as the upstream's own name.
func validHost(s string) bool {
	host, port := s, ""
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return false
		}
		host, port = s[1:end], s[end+1:]
		if port != "" && port[0] != ':' {
			return false
		}
	} else if i := strings.IndexByte(s, ':'); i >= 0 {
		host, port = s[:i], s[i:]
	}
	if host == "" {
		return false
	}
	for i := 1; i < len(port); i++ {
		if port[i] < '0' || port[i] > '9' {
			return false
		}
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("-._~!$&'()*+,;=%", c) >= 0:
		case c == ':' && s[0] == '[':
		default:
			return false
		}
	}
	return true
}

// parseContentLength parses the Content-Length field lines (RFC 9110 §8.6):
//
//	Content-Length = 1*DIGIT
//
// A field may carry a comma-separated list, and there may be several field
// lines; RFC 9110 §8.6 allows a recipient to accept them when every
// element has the same value, and requires rejecting them otherwise. Signs,
// inner spaces, hex, empty elements and values beyond math.MaxInt64 are
// refused.
func parseContentLength(values []string) (int64, *Error) {
	n := int64(-1)
	for _, v := range values {
		for elem := range strings.SplitSeq(v, ",") {
			x, ok := parseDecimal(trimOWS(elem))
			if !ok {
				return 0, newError(CodeInvalidContentLength, fmt.Sprintf("Content-Length %q", excerpt([]byte(v), 40)))
			}
			if n >= 0 && x != n {
				return 0, newError(CodeConflictingLength, fmt.Sprintf("Content-Length values %d and %d", n, x))
			}
			n = x
		}
	}
	return n, nil
}

// parseDecimal parses 1*DIGIT into a non-negative int64, reporting false
// for anything else or for a value that does not fit.
func parseDecimal(s string) (int64, bool) {
	if len(s) == 0 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		d := int64(c - '0')
		if n > (math.MaxInt64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// forEachElement calls fn with each non-empty element of a comma-separated
// list (RFC 9110 §5.6.1), whitespace removed.
func forEachElement(v string, fn func(string)) {
	for elem := range strings.SplitSeq(v, ",") {
		if elem = trimOWS(elem); elem != "" {
			fn(elem)
		}
	}
}

// finalChunked reports whether the last coding of the Transfer-Encoding
// field values is chunked, ignoring empty list elements (RFC 9110 §5.6.1)
// and transfer parameters.
func finalChunked(values []string) bool {
	for i := len(values) - 1; i >= 0; i-- {
		elems := strings.Split(values[i], ",")
		for j := len(elems) - 1; j >= 0; j-- {
			e := elems[j]
			if k := strings.IndexByte(e, ';'); k >= 0 {
				e = e[:k]
			}
			if e = trimOWS(e); e != "" {
				return asciiEqualFold(e, "chunked")
			}
		}
	}
	return false
}
