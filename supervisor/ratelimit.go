package supervisor

import (
	"container/list"
	"net/netip"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
)

// limiter holds token buckets keyed by client and rate limit class, at most
// max of them; the least recently used is evicted in O(1). Go's maps hash
// with a per-process random seed, so keys an attacker picks cannot be
// precomputed to collide. Owned by the loop.
type limiter struct {
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

func newLimiter(max int) *limiter {
	return &limiter{max: max, buckets: make(map[bucketKey]*list.Element), lru: list.New()}
}

// take charges one request. It reports whether it is allowed and, if not,
// how long until it would be.
func (l *limiter) take(client netip.Addr, rl *config.RateLimit, now time.Time) (bool, time.Duration) {
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

func (l *limiter) evict() {
	if el := l.lru.Back(); el != nil {
		delete(l.buckets, l.lru.Remove(el).(*bucket).key)
	}
}

// len is the number of buckets held.
func (l *limiter) len() int { return len(l.buckets) }
