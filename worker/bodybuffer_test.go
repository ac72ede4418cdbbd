package worker

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"slices"
	"testing"
)

// trickle is a body arriving piece bytes per read, then err (io.EOF when
// whole).
type trickle struct {
	data  []byte
	piece int
	err   error
	read  int
}

func (t *trickle) Read(p []byte) (int, error) {
	if t.read == len(t.data) {
		return 0, t.err
	}
	n := copy(p[:min(len(p), t.piece)], t.data[t.read:])
	t.read += n
	return n, nil
}

func bodyBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i * 7)
	}
	return b
}

// TestReadArrivedReports: a body is read whole, its count reported every
// step (more each time, never past what arrived), its buffer at most twice
// what arrived and never past the limit.
func TestReadArrivedReports(t *testing.T) {
	for _, tc := range []struct {
		name  string
		n     int
		limit int64
		want  []int64
	}{
		{"smaller than a step", 10_000, 1 << 20, nil},
		{"of several steps, under its limit", 200_000, 1 << 20, []int64{65536, 131072, 196608}},
		{"exactly its limit", 131072, 131072, []int64{65536, 131072}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := bodyBytes(tc.n)
			r := &trickle{data: src, piece: 1000, err: io.EOF}
			var reports []int64
			got, err := readArrived(r, tc.limit, bodyReportStep, func(n int64) bool {
				if n > int64(r.read) {
					t.Errorf("reported %d bytes, %d arrived", n, r.read)
				}
				reports = append(reports, n)
				return true
			})
			if err != nil || !bytes.Equal(got, src) {
				t.Fatalf("read %d bytes, %v; want the %d sent", len(got), err, tc.n)
			}
			if !slices.Equal(reports, tc.want) {
				t.Errorf("reports %v, want %v", reports, tc.want)
			}
			if c := int64(cap(got)); c > 2*int64(tc.n) || c > tc.limit {
				t.Errorf("a buffer of %d bytes for %d received, limit %d", c, tc.n, tc.limit)
			}
		})
	}
}

// TestReadArrivedRefused: once report refuses, nothing more is read: the
// body holds at most a step past the last count accepted.
func TestReadArrivedRefused(t *testing.T) {
	r := &trickle{data: bodyBytes(1 << 20), piece: 5000, err: io.EOF}
	reports := 0
	_, err := readArrived(r, 1<<20, bodyReportStep, func(int64) bool {
		reports++
		return reports < 2
	})
	if err != errBodyRefused {
		t.Fatalf("got %v, want errBodyRefused", err)
	}
	if r.read != 2*bodyReportStep {
		t.Errorf("%d bytes read, want %d: the accepted step and the refused one", r.read, 2*bodyReportStep)
	}
}

// TestReadArrivedDeclaredOnly: a body that declares its limit (1 MiB) and
// sends a few bytes before its reader fails (the minimum body rate)
// allocates for what arrived, not for what it declared.
func TestReadArrivedDeclaredOnly(t *testing.T) {
	slow := errors.New("too slow")
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 16 {
		r := &trickle{data: bodyBytes(100), piece: 100, err: slow}
		if _, err := readArrived(r, 1<<20, bodyReportStep, func(int64) bool { return true }); err != slow {
			t.Fatalf("got %v, want the reader's error", err)
		}
	}
	runtime.ReadMemStats(&after)
	// 16 bodies declaring 1 MiB each: what they allocate is far under one.
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Errorf("16 bodies of 100 bytes that declared 1 MiB allocated %d bytes", n)
	}
}

// TestReadArrivedOverLimit: a reader that gives more than the limit is
// refused with ErrBodyTooLarge.
func TestReadArrivedOverLimit(t *testing.T) {
	r := &trickle{data: bodyBytes(5000), piece: 5000, err: io.EOF}
	if _, err := readArrived(r, 4000, bodyReportStep, func(int64) bool { return true }); err != ErrBodyTooLarge {
		t.Fatalf("got %v, want ErrBodyTooLarge", err)
	}
}
