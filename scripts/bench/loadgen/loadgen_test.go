//go:build linux

package main

import (
	"bufio"
	"math"
	"strings"
	"testing"
	"time"
)

func TestReadResponseFraming(t *testing.T) {
	cases := []struct {
		name  string
		wire  string
		bytes int64
		close bool
	}{
		{"content-length", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", 43, false},
		{"connection close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nhi", 59, true},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 60, false},
		{"to the end", "HTTP/1.0 200 OK\r\n\r\nrest of it", 29, true},
		{"no body", "HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n", 48, false},
	}
	for _, c := range cases {
		// a second response after the first must be left unread
		rd := bufio.NewReader(strings.NewReader(c.wire + "HTTP/1.1 500 X\r\n\r\n"))
		if c.close {
			rd = bufio.NewReader(strings.NewReader(c.wire))
		}
		r, err := readResponse(rd)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if r.bytes != c.bytes || r.close != c.close || r.status/100 != 2 && r.status != 304 {
			t.Errorf("%s: got %+v, want %d bytes, close %v", c.name, r, c.bytes, c.close)
		}
		if !c.close {
			if next, err := readResponse(rd); err != nil || next.status != 500 {
				t.Errorf("%s: the next response: %+v %v", c.name, next, err)
			}
		}
	}
	if _, err := readResponse(bufio.NewReader(strings.NewReader("SSH-2.0\r\n\r\n"))); err == nil {
		t.Error("a non-HTTP answer was accepted")
	}
}

func TestParseHead(t *testing.T) {
	h, err := parseHead([]byte("HTTP/1.1 404 Not Found\r\ncontent-length: 12\r\nConnection: keep-alive\r\n\r\n"))
	if err != nil || h.status != 404 || h.length != 12 || h.close {
		t.Fatalf("got %+v, %v", h, err)
	}
	h, err = parseHead([]byte("HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n"))
	if err != nil || !h.close {
		t.Fatalf("HTTP/1.0 without keep-alive must close: %+v, %v", h, err)
	}
}

func TestHistQuantiles(t *testing.T) {
	var h hist
	for i := 1; i <= 10000; i++ {
		h.add(time.Duration(i) * time.Microsecond)
	}
	for _, q := range []float64{0.5, 0.9, 0.99} {
		want := q * 10 // ms
		if got := h.quantile(q); math.Abs(got-want)/want > 0.04 {
			t.Errorf("quantile %v: %v ms, want %v ms within 4%%", q, got, want)
		}
	}
	for us := uint64(0); us < 1<<20; us = us*5/4 + 1 {
		if b := bucket(us); lower(b) > us || b+1 < histBuckets && lower(b+1) <= us {
			t.Fatalf("%d µs in bucket %d of [%d, %d)", us, b, lower(b), lower(b+1))
		}
	}
}
