// Package limits holds the supervisor's per-client limits that are not the
// loop's own bookkeeping: the key a peer address is counted under, the
// token-bucket rate limiter and the penalty box (docs/DESIGN.md §2.3, §2.10,
// §4.3). Its values are owned by the loop and are not safe for concurrent
// use; it knows nothing of the loop.
package limits

import (
	"container/list"
	"net/netip"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
)

// Limiter holds token buckets keyed by client and rate limit class, at most
// max of them; the least recently used is evicted in O(1). Go's maps hash
// with a per-process random seed, so keys an attacker picks cannot be
// precomputed to collide. Owned by the loop.
type Limiter struct {
	max     int
	buckets map[bucketKey]*list.Element
	// lru holds the *bucket values, the most recently used in front.
	lru *list.List
}

type bucketKey struct {
	client netip.Addr
	class  string
}

// bucket is one client's tokens for one class. Tokens refill continuously
// at rate per `per`, up to burst: a quiet client's bucket is full again
// without any timer.
type bucket struct {
	key    bucketKey
	tokens float64
	last   time.Time
}

// NewLimiter returns a limiter holding at most max buckets.
func NewLimiter(max int) *Limiter {
	return &Limiter{max: max, buckets: make(map[bucketKey]*list.Element), lru: list.New()}
}

// Take charges one request of client in class rl. It reports whether it is allowed and, if not,
// how long until it would be.
func (l *Limiter) Take(client netip.Addr, rl *config.RateLimit, now time.Time) (bool, time.Duration) {
	k := bucketKey{client: client, class: rl.Name}
	perToken := rl.Per / time.Duration(rl.Rate)
	var b *bucket
	if el := l.buckets[k]; el != nil {
		l.lru.MoveToFront(el)
		b = el.Value.(*bucket)
		b.tokens = min(float64(rl.Burst), b.tokens+float64(now.Sub(b.last))/float64(perToken))
		b.last = now
	} else {
		if len(l.buckets) >= l.max {
			l.evict()
		}
		b = &bucket{key: k, tokens: float64(rl.Burst), last: now}
		l.buckets[k] = l.lru.PushFront(b)
	}
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) * float64(perToken))
}

// Peek reports what Take would, charging nothing and keeping no new
// bucket: a client without one has a full bucket.
func (l *Limiter) Peek(client netip.Addr, rl *config.RateLimit, now time.Time) (bool, time.Duration) {
	el := l.buckets[bucketKey{client: client, class: rl.Name}]
	if el == nil {
		return rl.Burst >= 1, 0
	}
	perToken := rl.Per / time.Duration(rl.Rate)
	b := el.Value.(*bucket)
	tokens := min(float64(rl.Burst), b.tokens+float64(now.Sub(b.last))/float64(perToken))
	if tokens >= 1 {
		return true, 0
	}
	return false, time.Duration((1 - tokens) * float64(perToken))
}

func (l *Limiter) evict() {
	if el := l.lru.Back(); el != nil {
		delete(l.buckets, l.lru.Remove(el).(*bucket).key)
	}
}

// Len is the number of buckets held.
func (l *Limiter) Len() int { return len(l.buckets) }

// SetMax bounds the buckets held to max (on reload). A table already over a
// lower bound keeps its size: each new key then evicts one.
func (l *Limiter) SetMax(max int) { l.max = max }

// Clients returns the client keys that hold a bucket, in no order, for
// inspection: the tests check that only keys the supervisor derived are
// charged.
func (l *Limiter) Clients() []netip.Addr {
	out := make([]netip.Addr, 0, len(l.buckets))
	for k := range l.buckets {
		out = append(out, k.client)
	}
	return out
}

// BucketState is one bucket as an upgrade hands it to the new supervisor
// (docs/DESIGN.md §11): its tokens and how long ago it was last charged.
type BucketState struct {
	Client netip.Addr
	Class  string
	Tokens float64
	Age    time.Duration
}

// Export returns every bucket, the least recently used first, so that
// Import in that order keeps the order of eviction.
func (l *Limiter) Export(now time.Time) []BucketState {
	out := make([]BucketState, 0, len(l.buckets))
	for el := l.lru.Back(); el != nil; el = el.Prev() {
		b := el.Value.(*bucket)
		out = append(out, BucketState{Client: b.key.client, Class: b.key.class, Tokens: b.tokens, Age: max(0, now.Sub(b.last))})
	}
	return out
}

// Import adds a bucket that another supervisor exported, replacing one of
// the same client and class; past max the least recently used goes.
func (l *Limiter) Import(s BucketState, now time.Time) {
	k := bucketKey{client: s.Client, class: s.Class}
	if el := l.buckets[k]; el != nil {
		l.lru.Remove(el)
		delete(l.buckets, k)
	}
	if len(l.buckets) >= l.max {
		l.evict()
	}
	l.buckets[k] = l.lru.PushFront(&bucket{key: k, tokens: s.Tokens, last: now.Add(-s.Age)})
}
