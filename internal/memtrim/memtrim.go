// Package memtrim gives a process's free memory back to the operating
// system once a burst of work has passed.
//
// After a burst (10 000 connections served once, say) the Go runtime keeps
// what the burst left: garbage not yet collected, because a quiet process
// allocates too little to start a collection; buffers in sync.Pools; freed
// goroutine stacks; and free heap pages its background scavenger returns only
// slowly. None of it is live, all of it counts in RSS. A trim collects twice
// (a sync.Pool keeps its items through one collection) and returns every free
// page at once (debug.FreeOSMemory). It runs only when the process has become
// quiet after allocating at least a burst's worth, so a busy process never
// pays for it and a quiet one pays once.
package memtrim

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Policy says when a trim pays.
type Policy struct {
	// Interval is how often allocation is sampled.
	Interval time.Duration
	// Burst is how many bytes must have been allocated since the last
	// trim (or the process's start) for a trim to be worth its collections.
	Burst uint64
	// Quiet is the most a process may allocate during the last two
	// Intervals and still count as quiet: two, so that what ends shortly
	// after its last use (a worker's idle server goroutines) has ended.
	Quiet uint64
}

// Default is the policy gatehouse's processes run with: a trim at most once
// per burst of 2 MiB, once the process allocated less than 48 KiB in 1.5 s,
// so that what a burst left is given back 1.5 to 2.25 s after its end (a
// worker's server goroutines end a second after their last job, before).
var Default = Policy{Interval: 750 * time.Millisecond, Burst: 2 << 20, Quiet: 48 << 10}

// due reports whether a trim pays, given the bytes allocated since the last
// trim and during the last two intervals.
func (p Policy) due(sinceTrim, lastIntervals uint64) bool {
	return sinceTrim >= p.Burst && lastIntervals < p.Quiet
}

// Run samples allocation every p.Interval and trims when p says it pays,
// until ctx is done. trimmed, if not nil, is called after each trim.
func Run(ctx context.Context, p Policy, trimmed func()) {
	t := time.NewTicker(p.Interval)
	defer t.Stop()
	sample := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	read := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	// What the process allocated before Run counts toward the first
	// burst: start-up garbage is given back too.
	var base uint64
	last := read()
	prev := last
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := read()
		if p.due(now-base, now-prev) {
			Trim()
			// The trim's own collections allocate nothing that counts.
			now = read()
			base = now
			if trimmed != nil {
				trimmed()
			}
		}
		prev, last = last, now
	}
}

// Trim collects twice, so items a sync.Pool kept through the first
// collection go too, and returns every free page to the operating system.
func Trim() {
	runtime.GC()
	debug.FreeOSMemory()
}
