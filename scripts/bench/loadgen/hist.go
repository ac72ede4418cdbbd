//go:build linux

package main

import (
	"math/bits"
	"time"
)

// hist is a latency histogram in microseconds with 32 buckets per power of
// two (about 3 % resolution): recording is an increment, so 1000 clients
// can each keep one without a lock, and memory does not grow with the run.
type hist struct {
	b     [histBuckets]uint64
	n     uint64
	maxUS uint64
}

const histBuckets = 64 + 32*40

func bucket(us uint64) int {
	if us < 64 {
		return int(us)
	}
	e := bits.Len64(us) - 6
	i := 32*e + int(us>>uint(e))
	if i >= histBuckets {
		return histBuckets - 1
	}
	return i
}

// lower returns the smallest value in bucket i; the bucket spans
// [lower(i), lower(i+1)).
func lower(i int) uint64 {
	if i < 64 {
		return uint64(i)
	}
	e := i/32 - 1
	return uint64(i%32+32) << uint(e)
}

func (h *hist) add(d time.Duration) {
	us := uint64(d / time.Microsecond)
	h.b[bucket(us)]++
	h.n++
	if us > h.maxUS {
		h.maxUS = us
	}
}

func (h *hist) merge(o *hist) {
	for i := range h.b {
		h.b[i] += o.b[i]
	}
	h.n += o.n
	h.maxUS = max(h.maxUS, o.maxUS)
}

// quantile returns the q-quantile in milliseconds, the middle of its bucket.
func (h *hist) quantile(q float64) float64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q * float64(h.n))
	if rank >= h.n {
		rank = h.n - 1
	}
	var seen uint64
	for i, c := range h.b {
		seen += c
		if seen > rank {
			lo := lower(i)
			hi := lo + 1
			if i+1 < histBuckets {
				hi = lower(i + 1)
			}
			return float64(lo+hi) / 2 / 1000
		}
	}
	return float64(h.maxUS) / 1000
}
