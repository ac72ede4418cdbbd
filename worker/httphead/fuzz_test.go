package httphead

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// fuzzHeads seeds the head fuzz targets alongside testdata/fuzz.
var fuzzHeads = []string{
	"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
	browserGET,
	"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhelloGET / HTTP/1.1\r\nHost: y\r\n\r\n",
	"POST /p HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;a=\"b\"\r\nhello\r\n0\r\nX: y\r\n\r\nGET / HTTP/1.1\r\n",
	"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 5\r\n\r\nhello",
	"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	"GET http://a.example/x HTTP/1.1\r\nHost: b\r\nOrigin: https://o.example\r\n\r\n",
	"OPTIONS * HTTP/1.0\r\nConnection: keep-alive\r\nExpect: 100-continue\r\n\r\n",
	"\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n",
	"GET / HTTP/1.1\nHost: x\n\n",
	"GET / HTTP/1.1\r\nHost : x\r\n\r\n",
	"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n",
	"PUT /u HTTP/1.1\r\nHost: x\r\nTrailer: X-Sum\r\nTransfer-Encoding: CHUNKED\r\n\r\n" +
		"2;q=\"a;b\"\r\nok\r\n000\r\nX-Sum: 1\r\n\r\n",
	"POST / HTTP/1.0\r\nContent-Length: 007\r\n\r\n1234567",
}

// checkHeadInvariants fails t if a head ReadHead accepted from data, with
// rest left unread, breaks a promise of the package.
func checkHeadInvariants(t *testing.T, data []byte, h *Head, rest string, lim Limits) {
	t.Helper()
	lim = lim.withDefaults()
	consumed := len(data) - len(rest)
	if h.Size != consumed {
		t.Fatalf("Size %d, consumed %d", h.Size, consumed)
	}
	if max := 2*maxLeadingEmptyLines + lim.MaxStartLine + lim.MaxHeaderBytes + 2; h.Size > max {
		t.Fatalf("Size %d over the limits' %d", h.Size, max)
	}
	if n := len(h.Method) + len(h.Target) + len(h.Proto) + 4; n > lim.MaxStartLine {
		t.Fatalf("request line of %d bytes over the limit %d", n, lim.MaxStartLine)
	}
	head := data[:h.Size]
	if !bytes.HasSuffix(head, []byte("\r\n\r\n")) {
		t.Fatalf("head does not end in CRLF: %q", head)
	}
	crlf := bytes.Count(head, []byte("\r\n"))
	if bytes.Count(head, []byte("\n")) != crlf || bytes.Count(head, []byte("\r")) != crlf {
		t.Fatalf("bare CR or LF in accepted head %q", head)
	}
	if bytes.IndexByte(head, 0) >= 0 {
		t.Fatalf("NUL in accepted head %q", head)
	}
	if !isToken(h.Method) || (h.Proto != "HTTP/1.1" && h.Proto != "HTTP/1.0") || h.URL == nil {
		t.Fatalf("bad request line %q %q %q", h.Method, h.Target, h.Proto)
	}
	lines, bytesUsed := 0, 0
	for k, vv := range h.Header {
		if !ValidFieldName(k) || http.CanonicalHeaderKey(k) != k {
			t.Fatalf("invalid or non-canonical name %q", k)
		}
		for _, v := range vv {
			if !ValidFieldValue(v) {
				t.Fatalf("invalid value %q for %q", v, k)
			}
			lines++
			bytesUsed += len(k) + 1 + len(v) + 2
		}
	}
	if lines > lim.MaxHeaderLines || bytesUsed > lim.MaxHeaderBytes {
		t.Fatalf("%d field lines, %d bytes over limits %+v", lines, bytesUsed, lim)
	}
	if h.Chunked != (h.ContentLength == -1) || h.ContentLength < -1 {
		t.Fatalf("Chunked %t with ContentLength %d", h.Chunked, h.ContentLength)
	}
	if h.Chunked && (h.Header["Content-Length"] != nil || h.ProtoMinor == 0) {
		t.Fatalf("chunked request with Content-Length or in HTTP/1.0")
	}
	if n := len(h.Header["Host"]); n > 1 || (h.ProtoMinor == 1 && n != 1) {
		t.Fatalf("%d Host fields in HTTP/1.%d", n, h.ProtoMinor)
	}
}

func FuzzReadHead(f *testing.F) {
	for _, s := range fuzzHeads {
		f.Add([]byte(s))
	}
	small := Limits{MaxStartLine: 32, MaxHeaderBytes: 64, MaxHeaderLines: 3}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, lim := range []Limits{{}, small} {
			var want string
			for i, size := range []int{64 << 10, 16, 4096} {
				br := bufio.NewReaderSize(bytes.NewReader(data), size)
				h, err := ReadHead(br, lim)
				rest, _ := io.ReadAll(br)
				if err == nil {
					checkHeadInvariants(t, data, h, string(rest), lim)
				} else {
					rest = nil
				}
				if _, ok := err.(*Error); !ok && err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
					t.Fatalf("unexpected error type %T: %v", err, err)
				}
				got := summary(h, err) + "rest=" + string(rest)
				if i == 0 {
					want = got
				} else if got != want {
					t.Fatalf("bufio %d:\ngot  %s\nwant %s", size, got, want)
				}
			}
		}
		if o := OriginFromRaw(data); len(o) > maxOriginLen || !ValidFieldValue(o) {
			t.Fatalf("OriginFromRaw returned %q", o)
		}
	})
}

func FuzzChunked(f *testing.F) {
	for _, s := range []string{
		"0\r\n\r\n",
		"3\r\nabc\r\n0\r\n\r\nNEXT",
		"a;x=y;z=\"q\\\"\"\r\n0123456789\r\n0\r\nX: y\r\n\r\n",
		"0x1\r\na\r\n0\r\n\r\n",
		"1 ;e\r\na\r\n0\r\n\r\n",
		"3\r\nabcX\r\n0\r\n\r\n",
		"0\r\nContent-Length: 1\r\n\r\n",
		"FFFFFFFFFFFFFFFF\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		body, err, rest := decodeChunked(t, string(data), 64<<10, 32<<10)
		if err != nil {
			rest = ""
			if _, ok := err.(*Error); !ok && err != io.ErrUnexpectedEOF {
				t.Fatalf("unexpected error type %T: %v", err, err)
			}
		}
		want := body + "|" + errName(err) + "|" + rest
		for _, size := range []int{16, 4096} {
			for _, readSize := range []int{1, 5} {
				b, e, r := decodeChunked(t, string(data), size, readSize)
				if e != nil {
					r = ""
				}
				if got := b + "|" + errName(e) + "|" + r; got != want {
					t.Fatalf("bufio %d, reads of %d:\ngot  %q\nwant %q", size, readSize, got, want)
				}
			}
		}
		if err != nil {
			return
		}
		consumed := len(data) - len(rest)
		if len(body) > consumed || !bytes.HasSuffix(data[:consumed], []byte("\r\n")) {
			t.Fatalf("decoded %d bytes from %d consumed", len(body), consumed)
		}
		// The body delimits itself: exactly its bytes decode alone, and
		// one byte fewer is an unexpected end.
		if b, e, r := decodeChunked(t, string(data[:consumed]), 16, 64); e != nil || b != body || r != "" {
			t.Fatalf("body alone: got %q, %v, rest %q", b, e, r)
		}
		if _, e, _ := decodeChunked(t, string(data[:consumed-1]), 16, 64); e != io.ErrUnexpectedEOF {
			t.Fatalf("truncated body: got %v, want io.ErrUnexpectedEOF", e)
		}
	})
}

// FuzzBodyBoundary compares gatehouse with net/http's ReadRequest. When
// gatehouse accepts a request, net/http must accept it too and agree on
// where its body ends, unless knownDifference explains why not. net/http
// accepting what gatehouse refuses is fine: gatehouse is meant to be
// stricter.
func FuzzBodyBoundary(f *testing.F) {
	for _, s := range fuzzHeads {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		h, diff := boundaryDiff(data)
		if diff == "" {
			return
		}
		if why := knownDifference(data, h); why != "" {
			t.Logf("known difference (%s): %s", why, diff)
			return
		}
		t.Fatalf("input %q: %s", data, diff)
	})
}

// boundaryDiff reads data as one request with gatehouse and, on a copy,
// with net/http's ReadRequest. It returns gatehouse's head and how the two
// disagree: "" when gatehouse refuses the request or both agree on where
// its body ends (and on the decoded body, for chunked).
func boundaryDiff(data []byte) (*Head, string) {
	gr := bytes.NewReader(data)
	gbr := bufio.NewReaderSize(gr, 64<<10)
	h, err := ReadHead(gbr, Limits{})
	if err != nil {
		return nil, ""
	}
	var gBody []byte
	gEnd := 0
	if h.Chunked {
		gBody, err = io.ReadAll(NewChunkedReader(gbr, Limits{}))
		if err != nil {
			return nil, ""
		}
		gEnd = len(data) - gbr.Buffered() - gr.Len()
	}

	nr := bytes.NewReader(bytes.Clone(data))
	nbr := bufio.NewReaderSize(nr, 64<<10)
	req, err := http.ReadRequest(nbr)
	if err != nil {
		return h, fmt.Sprintf("gatehouse accepted, net/http refused: %v", err)
	}
	if nHead := len(data) - nbr.Buffered() - nr.Len(); nHead != h.Size {
		return h, fmt.Sprintf("head size: gatehouse %d, net/http %d", h.Size, nHead)
	}
	nChunked := len(req.TransferEncoding) == 1 && req.TransferEncoding[0] == "chunked"
	if nChunked != h.Chunked {
		return h, fmt.Sprintf("chunked: gatehouse %t, net/http %t", h.Chunked, nChunked)
	}
	if !h.Chunked {
		if req.ContentLength != h.ContentLength {
			return h, fmt.Sprintf("Content-Length: gatehouse %d, net/http %d", h.ContentLength, req.ContentLength)
		}
		return h, ""
	}
	nBody, err := io.ReadAll(req.Body)
	if err != nil {
		return h, fmt.Sprintf("gatehouse decoded the chunked body, net/http refused it: %v", err)
	}
	if nEnd := len(data) - nbr.Buffered() - nr.Len(); nEnd != gEnd || !bytes.Equal(nBody, gBody) {
		return h, fmt.Sprintf("chunked body: gatehouse ends at %d with %q, net/http at %d with %q", gEnd, gBody, nEnd, nBody)
	}
	return h, ""
}

// TestBoundaryDiff keeps the differential honest: each allow-list entry
// is a real difference today, and ordinary requests agree.
func TestBoundaryDiff(t *testing.T) {
	tests := []struct {
		in    string
		known bool // a known difference; otherwise the two must agree
	}{
		{"\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n", true},
		{"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2, 2\r\n\r\nok", true},
		{"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 02\r\n\r\nok", true},
		{"POST / HTTP/1.1\r\nHost: x\r\nTrailer: Content-Length\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", true},
		{"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok", false},
		{"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2;a=\"b\"\r\nok\r\n0\r\nX: y\r\n\r\nNEXT", false},
		{"POST / HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc", false},
		{browserGET, false},
	}
	for _, tt := range tests {
		h, diff := boundaryDiff([]byte(tt.in))
		if h == nil {
			t.Errorf("%q: gatehouse refused it", tt.in)
			continue
		}
		if tt.known {
			if diff == "" || knownDifference([]byte(tt.in), h) == "" {
				t.Errorf("%q: got diff %q, known %q; want a known difference", tt.in, diff, knownDifference([]byte(tt.in), h))
			}
		} else if diff != "" {
			t.Errorf("%q: got diff %q, want agreement", tt.in, diff)
		}
	}
}

// knownDifference returns why gatehouse and net/http's ReadRequest may
// legitimately disagree on data, which gatehouse accepted as h, or "" if
// they may not. Each entry is a case where gatehouse accepts what
// net/http refuses; none changes where the body ends.
func knownDifference(data []byte, h *Head) string {
	// RFC 9112 §2.2: a server SHOULD ignore at least one empty line before
	// the request line (for clients that send CRLF after a POST body);
	// gatehouse skips up to four. ReadRequest sees an empty request line.
	// (net/http's Server does not skip them either.)
	if bytes.HasPrefix(data, []byte("\r\n")) {
		return "leading empty lines"
	}
	cls := h.Header["Content-Length"]
	for _, v := range cls {
		// RFC 9110 §8.6 lets a recipient accept "Content-Length: 5, 5"
		// as 5; net/http refuses any list in one field.
		if strings.Contains(v, ",") {
			return "Content-Length list of identical values"
		}
	}
	for _, v := range cls[min(1, len(cls)):] {
		// Duplicate fields are compared as numbers ("5" and "005"
		// agree); net/http compares the strings.
		if v != cls[0] {
			return "Content-Length duplicates equal as numbers, not as strings"
		}
	}
	if h.Chunked {
		// net/http refuses a Trailer field that announces
		// Content-Length, Transfer-Encoding or Trailer. gatehouse
		// ignores the announcement: trailers are discarded, and a
		// forbidden one that actually arrives is refused.
		for _, v := range h.Header["Trailer"] {
			for elem := range strings.SplitSeq(v, ",") {
				switch http.CanonicalHeaderKey(trimOWS(elem)) {
				case "Content-Length", "Transfer-Encoding", "Trailer":
					return "Trailer field announcing a framing field"
				}
			}
		}
	}
	return ""
}
