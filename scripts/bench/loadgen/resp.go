//go:build linux

package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// response is what readResponse learns of one answer: enough to count it
// and to know whether the connection may carry another request.
type response struct {
	status int
	bytes  int64 // head and body as read from the wire
	close  bool  // the server will close: Connection: close, or a body delimited by the close
}

var errMalformed = errors.New("malformed response")

// head is a response head as far as framing needs it.
type head struct {
	status    int
	length    int64 // -1: none
	chunked   bool
	close     bool
	keepAlive bool
	http10    bool
}

// statusLine parses "HTTP/1.x NNN ...".
func (h *head) statusLine(line []byte) error {
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return errMalformed
	}
	st, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return errMalformed
	}
	h.status, h.length, h.http10 = st, -1, line[7] == '0'
	return nil
}

// field notes one header line's framing: Content-Length, Transfer-Encoding
// and Connection.
func (h *head) field(line []byte) error {
	colon := bytes.IndexByte(line, ':')
	if colon < 0 {
		return errMalformed
	}
	name, value := line[:colon], bytes.TrimSpace(line[colon+1:])
	switch {
	case bytes.EqualFold(name, []byte("Content-Length")):
		n, err := strconv.ParseInt(string(value), 10, 64)
		if err != nil || n < 0 {
			return errMalformed
		}
		h.length = n
	case bytes.EqualFold(name, []byte("Transfer-Encoding")):
		h.chunked = bytes.Contains(bytes.ToLower(value), []byte("chunked"))
	case bytes.EqualFold(name, []byte("Connection")):
		v := bytes.ToLower(value)
		h.close = h.close || bytes.Contains(v, []byte("close"))
		h.keepAlive = bytes.Contains(v, []byte("keep-alive"))
	}
	return nil
}

// done is called after the blank line: an HTTP/1.0 answer without
// keep-alive closes, and a body-less status has length 0.
func (h *head) done() {
	if h.http10 && !h.keepAlive {
		h.close = true
	}
	if h.status == 204 || h.status == 304 || h.status/100 == 1 {
		h.length, h.chunked = 0, false
	}
}

// parseHead parses a whole head (status line to blank line).
func parseHead(b []byte) (head, error) {
	var h head
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return h, errMalformed
	}
	if err := h.statusLine(b[:i+1]); err != nil {
		return h, err
	}
	for b = b[i+1:]; len(b) > 2; {
		i = bytes.IndexByte(b, '\n')
		if i < 0 {
			return h, errMalformed
		}
		if err := h.field(b[:i+1]); err != nil {
			return h, err
		}
		b = b[i+1:]
	}
	h.done()
	return h, nil
}

// readResponse reads one whole HTTP/1.x response from r: the head, then a
// body delimited by Content-Length, by chunks, or by the end of the
// stream. It parses only what framing needs, so the client's own cost per
// request stays small beside the server's.
func readResponse(r *bufio.Reader) (response, error) {
	var resp response
	var h head
	line, err := r.ReadSlice('\n')
	if err != nil {
		return resp, err
	}
	resp.bytes += int64(len(line))
	if err := h.statusLine(line); err != nil {
		return resp, err
	}
	for {
		line, err = r.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				return resp, errMalformed
			}
			return resp, err
		}
		resp.bytes += int64(len(line))
		if len(line) <= 2 {
			break
		}
		if err := h.field(line); err != nil {
			return resp, err
		}
	}
	h.done()
	resp.status, resp.close = h.status, h.close
	switch {
	case h.chunked:
		n, err := readChunked(r)
		resp.bytes += n
		if err != nil {
			return resp, err
		}
	case h.length >= 0:
		n, err := r.Discard(int(h.length))
		resp.bytes += int64(n)
		if err != nil {
			return resp, err
		}
	default:
		n, err := io.Copy(io.Discard, r)
		resp.bytes += n
		resp.close = true
		if err != nil {
			return resp, err
		}
	}
	return resp, nil
}

// readChunked discards a chunked body and its trailer, returning the bytes read.
func readChunked(r *bufio.Reader) (int64, error) {
	var total int64
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return total, err
		}
		total += int64(len(line))
		sz := bytes.TrimSpace(line)
		if i := bytes.IndexByte(sz, ';'); i >= 0 {
			sz = sz[:i]
		}
		n, err := strconv.ParseInt(string(sz), 16, 64)
		if err != nil || n < 0 {
			return total, fmt.Errorf("%w: chunk size %q", errMalformed, sz)
		}
		if n == 0 {
			for {
				line, err = r.ReadSlice('\n')
				if err != nil {
					return total, err
				}
				total += int64(len(line))
				if len(line) <= 2 {
					return total, nil
				}
			}
		}
		d, err := r.Discard(int(n) + 2)
		total += int64(d)
		if err != nil {
			return total, err
		}
	}
}
