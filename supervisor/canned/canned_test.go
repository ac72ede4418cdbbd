package canned

import (
	"bufio"
	"bytes"
	"net/http"
	"testing"
	"time"
)

// Every canned reply is a well-formed response whose Date is the second it
// was written in, kept current without allocating.
func TestCannedRepliesDated(t *testing.T) {
	c := NewReplies()
	t0 := time.Date(2026, 3, 1, 23, 59, 59, 900e6, time.FixedZone("X", 3600))
	for _, tt := range []struct {
		r      *Reply
		status int
	}{{&c.RequestTimeout, 408}, {&c.NoWorker, 503}, {&c.PlainToTLS, 400}} {
		for _, now := range []time.Time{t0, t0.Add(50 * time.Millisecond), t0.Add(2 * time.Second)} {
			b := tt.r.At(now)
			res, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(b)), nil)
			if err != nil {
				t.Fatalf("%d: %v\n%s", tt.status, err, b)
			}
			if res.StatusCode != tt.status || !res.Close {
				t.Errorf("status %d, close %v; want %d, close", res.StatusCode, res.Close, tt.status)
			}
			got, err := http.ParseTime(res.Header.Get("Date"))
			if want := now.Truncate(time.Second); err != nil || !got.Equal(want) {
				t.Errorf("%d at %v: Date %q (%v), want %v", tt.status, now, res.Header.Get("Date"), err, want.UTC())
			}
			if n, err := bufio.NewReader(res.Body).Discard(1 << 10); err == nil || int64(n) != res.ContentLength {
				t.Errorf("%d: body of %d bytes, Content-Length %d", tt.status, n, res.ContentLength)
			}
		}
	}
	next := t0
	if n := testing.AllocsPerRun(100, func() {
		next = next.Add(time.Second)
		c.RequestTimeout.At(next)
	}); n != 0 {
		t.Errorf("%v allocations per new second", n)
	}
}
