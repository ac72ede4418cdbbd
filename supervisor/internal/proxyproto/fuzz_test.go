package proxyproto

import (
	"errors"
	"testing"
)

// FuzzParse checks that Parse never panics, reports a length within its
// input, and is consistent as bytes arrive: every proper prefix of an
// accepted header is ErrIncomplete, and the header alone parses the same.
// Seeds are in testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	f.Add([]byte("PROXY TCP4 192.0.2.7 198.51.100.1 51000 443\r\nGET / HTTP/1.1\r\n"))
	f.Add(v2(0x21, 0x11, v2inet4(client4, front4)))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, n, err := Parse(b)
		if err != nil {
			if err != ErrIncomplete && !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is neither ErrIncomplete nor ErrMalformed", err)
			}
			if err == ErrIncomplete && len(b) >= MaxLen {
				t.Fatalf("ErrIncomplete after %d bytes, over MaxLen", len(b))
			}
			return
		}
		if n <= 0 || n > len(b) || n > MaxLen {
			t.Fatalf("length %d of %d bytes", n, len(b))
		}
		if h2, n2, err := Parse(b[:n]); err != nil || h2 != h || n2 != n {
			t.Fatalf("header alone: %+v, %d, %v; with the rest: %+v, %d", h2, n2, err, h, n)
		}
		for k := 0; k < n; k++ {
			if _, _, err := Parse(b[:k]); err != ErrIncomplete {
				t.Fatalf("prefix of %d bytes of a %d-byte header: %v", k, n, err)
			}
		}
		if h.Source.IsValid() != h.Destination.IsValid() || h.Source.IsValid() && h.Command != Proxy {
			t.Fatalf("inconsistent header %+v", h)
		}
	})
}
