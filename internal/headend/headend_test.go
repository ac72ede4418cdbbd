package headend

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/gatehouse-dev/gatehouse/worker/httphead"
)

// TestMaxHead checks that MaxHead covers the worker parser's limits.
func TestMaxHead(t *testing.T) {
	if need := 2*maxLeadingEmpty + httphead.DefaultMaxStartLine + httphead.DefaultMaxHeaderBytes + 2; MaxHead < need {
		t.Errorf("MaxHead %d < %d, what the parser may read before deciding", MaxHead, need)
	}
}

func TestScan(t *testing.T) {
	tests := []struct {
		name string
		in   string
		st   Status
		n    int
	}{
		{"empty", "", Incomplete, 0},
		{"request line", "GET / HTTP/1.1\r\n", Incomplete, 0},
		{"complete", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", Complete, 27},
		{"complete with body", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi", Complete, 47},
		{"no fields", "GET / HTTP/1.0\r\n\r\nGET", Complete, 18},
		{"leading empty lines", "\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n", Complete, 31},
		{"four leading empty lines", "\r\n\r\n\r\n\r\n", Incomplete, 0},
		{"five leading empty lines", "\r\n\r\n\r\n\r\n\r\n", Invalid, 0},
		{"CR at end", "GET / HTTP/1.1\r\nHost: x\r\n\r", Incomplete, 0},
		{"bare CR", "GET / HTTP/1.1\r\nHost: x\r\n\rhello", Invalid, 0},
		{"bare CR in line", "GET / HTTP/1.1\rX", Invalid, 0},
		{"bare LF", "GET / HTTP/1.1\nHost: x\n\n", Invalid, 0},
		{"LF LF", "\n\n", Invalid, 0},
		{"NUL", "\x16\x03\x01\x00\xa5", Invalid, 0},
		// A request line is decided as soon as it ends: without an
		// HTTP-version no head can follow it.
		{"request line without version", "GET /\r\n", Invalid, 0},
		{"method alone", "GET\r\n", Invalid, 0},
		{"after empty lines, without version", "\r\n\r\nGET /\r\n", Invalid, 0},
		{"lowercase version", "GET / http/1.1\r\n", Invalid, 0},
		{"version of two digits", "GET / HTTP/1.10\r\n", Invalid, 0},
		{"SP after version", "GET / HTTP/1.1 \r\n", Invalid, 0},
		{"HTTP/2.0 waits for its fields", "GET / HTTP/2.0\r\n", Incomplete, 0},
		{"HTTP/1.0 waits for its fields", "GET / HTTP/1.0\r\nHost: x\r\n", Incomplete, 0},
		{"request line unfinished", "GET /", Incomplete, 0},
		{"fields end in anything", "GET / HTTP/1.1\r\nX: GET /\r\n\r\n", Complete, 28},
	}
	for _, tt := range tests {
		st, n := Scan([]byte(tt.in), 0)
		if st != tt.st || st == Complete && n != tt.n {
			t.Errorf("%s: got %d, %d; want %d, %d", tt.name, st, n, tt.st, tt.n)
		}
	}
}

// TestScanResume feeds heads byte by byte, resuming each scan where the
// last one stopped, and checks that the end is found at the same place.
func TestScanResume(t *testing.T) {
	for _, in := range []string{
		"GET / HTTP/1.1\r\nHost: x\r\nA: b\r\n\r\n",
		"\r\n\r\nGET / HTTP/1.0\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\n\rX",
		"\r\nGET /\r\nHost: x\r\n\r\n",
		"GET / HTTP/1.1\r\nX: y\r\n\r\n",
	} {
		wantSt, wantN := Scan([]byte(in), 0)
		from := 0
		for k := 0; k <= len(in); k++ {
			st, n := Scan([]byte(in[:k]), from)
			if st == Incomplete {
				from = n
				continue
			}
			if st != wantSt || st == Complete && n != wantN {
				t.Errorf("%q resumed: got %d, %d at %d bytes; want %d, %d", in, st, n, k, wantSt, wantN)
			}
			break
		}
	}
}

// FuzzScan checks Scan against the worker's head parser: a head Scan calls
// complete is read by the parser from exactly those bytes without waiting
// for more; input Scan calls invalid is refused by the parser without
// waiting for more; and resuming a scan on a longer input agrees with
// scanning it whole. Seeds are in testdata/fuzz/FuzzScan.
func FuzzScan(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), 10)
	f.Add([]byte("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\rhello"), 3)
	f.Fuzz(func(t *testing.T, in []byte, cut int) {
		st, n := Scan(in, 0)
		switch st {
		case Complete:
			if n <= 0 || n > len(in) {
				t.Fatalf("Complete with length %d of %d", n, len(in))
			}
			_, err := httphead.ReadHead(bufio.NewReader(bytes.NewReader(in[:n])), httphead.Limits{})
			if errors.Is(err, io.ErrUnexpectedEOF) || err == io.EOF {
				t.Fatalf("Scan says complete at %d but the parser wants more: %v", n, err)
			}
		case Invalid:
			_, err := httphead.ReadHead(bufio.NewReader(bytes.NewReader(in)), httphead.Limits{})
			var he *httphead.Error
			if !errors.As(err, &he) {
				t.Fatalf("Scan says invalid but the parser says %v", err)
			}
		}
		if cut < 0 || cut > len(in) {
			return
		}
		st1, n1 := Scan(in[:cut], 0)
		if st1 != Incomplete {
			return
		}
		if st2, n2 := Scan(in, n1); st2 != st || st == Complete && n2 != n {
			t.Fatalf("resumed at %d: %d, %d; whole: %d, %d", n1, st2, n2, st, n)
		}
	})
}
