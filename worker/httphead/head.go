package httphead

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Head is a parsed request head. ReadHead returns it fully validated; the
// caller owns it and may modify it.
type Head struct {
	Method     string
	Target     string   // request-target exactly as sent
	URL        *url.URL // parsed target; never nil
	Proto      string   // "HTTP/1.0" or "HTTP/1.1"
	ProtoMajor int
	ProtoMinor int
	// Header holds every field line under its canonical key
	// (http.CanonicalHeaderKey), values in the order received and with
	// surrounding whitespace removed. Unlike net/http, Host stays in it.
	Header http.Header
	// Host is the authority the request is for: the target's authority
	// for absolute-form (RFC 9112 §3.2.2 says the Host field is then
	// ignored), else the Host field's value, possibly "" for HTTP/1.0.
	Host string
	// ContentLength is the body length: the Content-Length value, 0 when
	// the request has no body, -1 when the body is chunked.
	ContentLength int64
	Chunked       bool // Transfer-Encoding: chunked
	Close         bool // a Connection field has the "close" token
	KeepAlive     bool // a Connection field has the "keep-alive" token
	// Expect100 reports an HTTP/1.1 request with Expect: 100-continue.
	// RFC 9110 §10.1.1: the expectation in an HTTP/1.0 request is ignored.
	Expect100 bool
	// Size is the number of bytes ReadHead consumed for the head: any
	// skipped empty lines, the request line, the header section and the
	// empty line that ends it.
	Size int
}

// HasBody reports whether a body follows the head.
func (h *Head) HasBody() bool { return h.Chunked || h.ContentLength > 0 }

// Persistent reports whether the client asked for the connection to stay
// open after this request (RFC 9112 §9.3): HTTP/1.1 unless it sent
// "Connection: close", HTTP/1.0 only with "Connection: keep-alive" and no
// "close". A server may close anyway.
func (h *Head) Persistent() bool {
	if h.Close {
		return false
	}
	return h.ProtoMinor >= 1 || h.KeepAlive
}

// ReadHead reads one request head from r and validates it strictly (RFC
// 9112 §2-§6 with the choices listed in the package documentation). On
// success r is positioned at the first byte of the body, or of the next
// request when there is no body.
//
// Errors:
//   - io.EOF, exactly, when the input ended before the request line began
//     (a client closing an idle connection, possibly after the empty lines
//     RFC 9112 §2.2 allows);
//   - io.ErrUnexpectedEOF, exactly, when it ended inside the head;
//   - *Error when the head is refused; answer with its Status and close;
//   - any other read error wrapped with %w, so errors.As finds a
//     net.Error for a deadline set by the caller.
//
// ReadHead never reads past the head's final CRLF except into r's buffer,
// and never buffers more than the limits allow beyond r's own buffer. It
// works with any buffer size of r (16 bytes or more).
func ReadHead(r *bufio.Reader, lim Limits) (*Head, error) {
	lim = lim.withDefaults()
	var scratch []byte
	size := 0

	var line []byte
	for empties := 0; ; empties++ {
		l, err := readLine(r, lim.MaxStartLine, &scratch)
		if err == errLineTooLong {
			// 414 names the target as what is too long (RFC 9110
			// §15.5.15). A line with no SP within the limit (in the
			// part of it readLine returns: at least half the limit)
			// is all method, which no server implements: 400.
			if bytes.IndexByte(l[:min(len(l), lim.MaxStartLine)], ' ') < 0 {
				return nil, newError(CodeInvalidMethod, fmt.Sprintf("method longer than the request line limit (%d bytes)", lim.MaxStartLine))
			}
			return nil, newError(CodeStartLineTooLong, fmt.Sprintf("request line longer than %d bytes", lim.MaxStartLine))
		}
		if err != nil {
			if err == io.EOF && len(l) == 0 {
				return nil, io.EOF
			}
			return nil, readError("request head", err)
		}
		size += len(l)
		if len(l) != 2 || l[0] != '\r' {
			line = l
			break
		}
		// RFC 9112 §2.2: a server SHOULD ignore at least one empty line
		// received before the request-line.
		if empties == maxLeadingEmptyLines {
			return nil, newError(CodeTooManyEmptyLines, fmt.Sprintf("more than %d empty lines before the request line", maxLeadingEmptyLines))
		}
	}

	h := &Head{}
	if e := h.parseRequestLine(line); e != nil {
		return nil, e
	}

	// Values are copied into one arena and converted to a string once, so
	// a head costs a handful of allocations instead of one per field.
	// Small heads keep the arena and the field list on the stack.
	var arenaBuf [2048]byte
	var fieldBuf [32]fieldRef
	arena, fields := arenaBuf[:0], fieldBuf[:0]
	n, err := readFields(r, lim, headerSection, &scratch, func(name, value []byte) error {
		fields = append(fields, fieldRef{key: canonicalKey(name), off: len(arena), end: len(arena) + len(value)})
		arena = append(arena, value...)
		return nil
	})
	size += n
	if err != nil {
		return nil, err
	}
	h.Size = size
	h.Header = makeHeader(fields, string(arena))

	if e := h.checkFraming(); e != nil {
		return nil, e
	}
	return h, nil
}

// fieldRef is a field line read into the arena: its canonical name and
// the position of its value.
type fieldRef struct {
	key      string
	off, end int
}

// makeHeader builds the Header of fields whose values are in values.
func makeHeader(fields []fieldRef, values string) http.Header {
	hdr := make(http.Header, len(fields))
	// Most fields appear once: one-element slices are cut from a slab
	// instead of allocated one per field, as net/textproto does.
	slab := make([]string, len(fields))
	for i, f := range fields {
		v := values[f.off:f.end]
		if vv, ok := hdr[f.key]; ok {
			hdr[f.key] = append(vv, v)
			continue
		}
		slab[i] = v
		hdr[f.key] = slab[i : i+1 : i+1]
	}
	return hdr
}

// canonicalKey returns the canonical form of a field name, without
// allocating for the common names already sent in canonical form.
func canonicalKey(name []byte) string {
	if k, ok := commonHeaders[string(name)]; ok {
		return k
	}
	return http.CanonicalHeaderKey(string(name))
}

// commonHeaders interns the names of fields browsers and tools usually
// send. It is immutable after package initialization.
var commonHeaders = func() map[string]string {
	m := make(map[string]string)
	for _, k := range []string{
		"Accept", "Accept-Charset", "Accept-Encoding", "Accept-Language",
		"Authorization", "Cache-Control", "Connection", "Content-Length",
		"Content-Type", "Cookie", "Dnt", "Expect", "Forwarded", "Host",
		"If-Match", "If-Modified-Since", "If-None-Match", "If-Range",
		"If-Unmodified-Since", "Keep-Alive", "Origin", "Pragma", "Priority",
		"Range", "Referer", "Sec-Ch-Ua", "Sec-Ch-Ua-Mobile",
		"Sec-Ch-Ua-Platform", "Sec-Fetch-Dest", "Sec-Fetch-Mode",
		"Sec-Fetch-Site", "Sec-Fetch-User", "Te", "Trailer",
		"Transfer-Encoding", "Upgrade", "Upgrade-Insecure-Requests",
		"User-Agent", "Via", "X-Forwarded-For", "X-Forwarded-Host",
		"X-Forwarded-Proto", "X-Real-Ip", "X-Requested-With",
	} {
		// Chrome sends some names in lower case.
		m[k], m[strings.ToLower(k)] = k, k
	}
	return m
}()
