package httphead

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
)

// bufSizes are the bufio sizes every head and body test runs with: the
// smallest bufio allows, a common one, and one larger than every limit.
var bufSizes = []int{16, 4096, 64 << 10}

// errName names an error for comparison in tests: the Code of an *Error,
// "EOF", "unexpected EOF", "" for nil, or "other: ..." for anything else.
func errName(err error) string {
	var he *Error
	switch {
	case err == nil:
		return ""
	case err == io.EOF:
		return "EOF"
	case err == io.ErrUnexpectedEOF:
		return "unexpected EOF"
	case errors.As(err, &he):
		return string(he.Code)
	}
	return "other: " + err.Error()
}

// readString runs ReadHead on in with a bufio.Reader of the given size and
// returns the head, the error and the bytes left unread.
func readString(tb testing.TB, in string, size int, lim Limits) (*Head, error, string) {
	tb.Helper()
	sr := strings.NewReader(in)
	br := bufio.NewReaderSize(sr, size)
	h, err := ReadHead(br, lim)
	rest, rerr := io.ReadAll(br)
	if rerr != nil {
		tb.Fatalf("reading rest: %v", rerr)
	}
	return h, err, string(rest)
}

// summary renders everything observable about a ReadHead result, so that
// results can be compared across bufio sizes.
func summary(h *Head, err error) string {
	if err != nil {
		return "error " + errName(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %q %q %s %d.%d host=%q cl=%d chunked=%t close=%t ka=%t e100=%t size=%d\n",
		h.Method, h.Target, h.URL.String(), h.Proto, h.ProtoMajor, h.ProtoMinor, h.Host,
		h.ContentLength, h.Chunked, h.Close, h.KeepAlive, h.Expect100, h.Size)
	keys := make([]string, 0, len(h.Header))
	for k := range h.Header {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%q\n", k, h.Header[k])
	}
	return b.String()
}

// decodeChunked decodes a chunked body from in with a bufio.Reader of the
// given size, reading with reads of readSize bytes, and returns the
// decoded bytes, the error and the bytes left unread.
func decodeChunked(tb testing.TB, in string, size, readSize int) (string, error, string) {
	tb.Helper()
	br := bufio.NewReaderSize(strings.NewReader(in), size)
	cr := NewChunkedReader(br, Limits{})
	var out []byte
	buf := make([]byte, readSize)
	var err error
	for {
		var n int
		n, err = cr.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			break
		}
	}
	if err == io.EOF {
		err = nil
	}
	rest, rerr := io.ReadAll(br)
	if rerr != nil {
		tb.Fatalf("reading rest: %v", rerr)
	}
	return string(out), err, string(rest)
}
