package upstream

import (
	"errors"
	"fmt"
)

// Pending counts w's Dial requests the broker has yet to answer, being
// dialed or waiting for the budget: each holds one of w's in-flight slots.
func (b *Broker) Pending(w Worker) int {
	n := 0
	h := b.workers[w]
	if h == nil {
		return 0
	}
	perUp := map[string]int{}
	for _, hc := range h.conns {
		perUp[hc.upstream]++
	}
	for name, held := range h.held {
		n += held - perUp[name]
	}
	for _, u := range b.upstreams {
		for _, wd := range u.waiting {
			if wd.h == h {
				n++
			}
		}
	}
	return n
}

// Check returns what is inconsistent in the broker's counts, or nil: each
// worker's share counts at least what it holds, each upstream's held count
// is what the workers hold, and the descriptors held are one per connection.
func (b *Broker) Check() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	fds := 0
	upHeld := map[string]int{}
	for _, h := range b.workers {
		perUp := map[string]int{}
		for _, hc := range h.conns {
			perUp[hc.upstream]++
			upHeld[hc.upstream]++
			fds++
		}
		for name, n := range h.held {
			if n < perUp[name] {
				bad("a worker holds %d connections to %s, its share counts %d", perUp[name], name, n)
			}
		}
	}
	if b.heldFDs != fds {
		bad("upstream descriptors held: %d, want %d", b.heldFDs, fds)
	}
	for name, u := range b.upstreams {
		if u.held != upHeld[name] {
			bad("upstream %s held: %d, want %d", name, u.held, upHeld[name])
		}
		if u.dialing < 0 {
			bad("upstream %s: %d dialing", name, u.dialing)
		}
	}
	return errors.Join(errs...)
}
