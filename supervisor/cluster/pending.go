package cluster

import "time"

// Pending holds what the loop waits on the store for, by token, until a
// uniform timeout: the rate checks whose worker waits for an answer. With
// one timeout the queue is in deadline order, so expiring is O(1) per
// entry. Owned by the loop, not safe for concurrent use.
type Pending[T any] struct {
	timeout time.Duration
	next    uint64
	byToken map[uint64]T
	queue   []pendingEntry
	head    int
}

type pendingEntry struct {
	token    uint64
	deadline time.Time
}

// NewPending returns an empty set whose entries time out after timeout.
func NewPending[T any](timeout time.Duration) *Pending[T] {
	return &Pending[T]{timeout: timeout, byToken: make(map[uint64]T)}
}

// Add holds v from now and returns its token.
func (p *Pending[T]) Add(v T, now time.Time) uint64 {
	p.next++
	p.byToken[p.next] = v
	p.queue = append(p.queue, pendingEntry{p.next, now.Add(p.timeout)})
	return p.next
}

// Take removes and returns the entry of token, if it is still held.
func (p *Pending[T]) Take(token uint64) (T, bool) {
	v, ok := p.byToken[token]
	if ok {
		delete(p.byToken, token)
	}
	return v, ok
}

// Expire removes every entry whose timeout passed by now, oldest first,
// passing each to fn.
func (p *Pending[T]) Expire(now time.Time, fn func(T)) {
	for p.head < len(p.queue) && !now.Before(p.queue[p.head].deadline) {
		e := p.queue[p.head]
		p.head++
		if v, ok := p.Take(e.token); ok {
			fn(v)
		}
	}
	p.compact()
}

// Deadline is the earliest timeout of an entry still held (zero: none).
func (p *Pending[T]) Deadline() time.Time {
	for p.head < len(p.queue) {
		e := p.queue[p.head]
		if _, ok := p.byToken[e.token]; ok {
			return e.deadline
		}
		p.head++
	}
	p.compact()
	return time.Time{}
}

// Len is the number of entries held.
func (p *Pending[T]) Len() int { return len(p.byToken) }

// compact drops the queue's consumed front once it is half of the queue,
// so the queue's memory stays proportional to what is held.
func (p *Pending[T]) compact() {
	if p.head == len(p.queue) {
		p.queue, p.head = p.queue[:0], 0
		return
	}
	if p.head > len(p.queue)/2 {
		n := copy(p.queue, p.queue[p.head:])
		p.queue, p.head = p.queue[:n], 0
	}
}
