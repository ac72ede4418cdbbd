package limits

import (
	"container/list"
	"net/netip"
	"time"
)

// PenaltyWindow is how far back the deaths a client key was present at are
// counted against limits.death_penalty_threshold.
const PenaltyWindow = time.Minute

// PenaltyBox refuses client keys that keep being present when workers die
// (docs/DESIGN.md §2.10), in the spirit of OpenSSH's PerSourcePenalties: a
// worker dies only for a real violation by code inside it, so one client
// whose connections are at N dying workers within a minute is likely
// causing the deaths, through a bug not found yet, and is refused for a
// while rather than allowed to keep the pool in restart backoff. It is
// bounded: past max keys the least recently struck is forgotten. Owned by
// the loop.
type PenaltyBox struct {
	threshold int // 0: penalties off
	duration  time.Duration
	max       int
	entries   map[netip.Addr]*list.Element
	// lru holds the *penaltyEntry values, most recently struck in front.
	lru *list.List
	// penalties counts the keys penalized, since start; imported those
	// another instance penalized (Impose).
	penalties uint64
	imported  uint64
}

// penaltyEntry is one client key's recent deaths and penalty.
type penaltyEntry struct {
	key     netip.Addr
	deaths  []time.Time // within PenaltyWindow, oldest first; fewer than threshold
	until   time.Time   // refused until then; zero when not penalized
	refused uint64      // connections refused during its penalties
}

// NewPenaltyBox returns a box that refuses a key for duration once it was
// present at threshold worker deaths within PenaltyWindow (0: never), holding
// at most max keys.
func NewPenaltyBox(threshold int, duration time.Duration, max int) *PenaltyBox {
	b := &PenaltyBox{entries: make(map[netip.Addr]*list.Element), lru: list.New()}
	b.Configure(threshold, duration, max)
	return b
}

// Configure applies (reloaded) limits; entries over a lower bound go, the
// least recently struck first.
func (b *PenaltyBox) Configure(threshold int, duration time.Duration, max int) {
	b.threshold, b.duration, b.max = threshold, duration, max
	for len(b.entries) > b.max {
		b.remove(b.lru.Back())
	}
}

// Strike records that key had a connection at a worker that died now. It
// reports whether this penalized the key.
func (b *PenaltyBox) Strike(key netip.Addr, now time.Time) bool {
	if b.threshold == 0 {
		return false
	}
	var e *penaltyEntry
	if el := b.entries[key]; el != nil {
		b.lru.MoveToFront(el)
		e = el.Value.(*penaltyEntry)
	} else {
		if len(b.entries) >= b.max {
			b.remove(b.lru.Back())
		}
		e = &penaltyEntry{key: key}
		b.entries[key] = b.lru.PushFront(e)
	}
	if now.Before(e.until) {
		return false // refused already
	}
	e.deaths = append(e.pruned(now), now)
	if len(e.deaths) < b.threshold {
		return false
	}
	e.until = now.Add(b.duration)
	e.deaths = nil
	b.penalties++
	return true
}

// Impose refuses key until until, a penalty another instance sharing the
// cluster store imposed. It reports whether this lengthened the key's
// penalty; penalties off (threshold 0) refuse no one.
func (b *PenaltyBox) Impose(key netip.Addr, until, now time.Time) bool {
	if b.threshold == 0 || !until.After(now) {
		return false
	}
	var e *penaltyEntry
	if el := b.entries[key]; el != nil {
		b.lru.MoveToFront(el)
		e = el.Value.(*penaltyEntry)
	} else {
		if len(b.entries) >= b.max {
			b.remove(b.lru.Back())
		}
		e = &penaltyEntry{key: key}
		b.entries[key] = b.lru.PushFront(e)
	}
	if !until.After(e.until) {
		return false
	}
	if !now.Before(e.until) {
		b.imported++
	}
	e.until = until
	e.deaths = nil
	return true
}

// Imported counts the penalties taken from other instances since start.
func (b *PenaltyBox) Imported() uint64 { return b.imported }

// Penalized reports whether key is refused now, counting the refusal.
func (b *PenaltyBox) Penalized(key netip.Addr, now time.Time) bool {
	el := b.entries[key]
	if el == nil {
		return false
	}
	e := el.Value.(*penaltyEntry)
	if !now.Before(e.until) {
		return false
	}
	e.refused++
	return true
}

// Threshold is the deaths within PenaltyWindow that penalize a key.
func (b *PenaltyBox) Threshold() int { return b.threshold }

// Duration is how long a penalized key is refused.
func (b *PenaltyBox) Duration() time.Duration { return b.duration }

// Penalties counts the keys penalized since start.
func (b *PenaltyBox) Penalties() uint64 { return b.penalties }

// pruned returns e's deaths still within the window.
func (e *penaltyEntry) pruned(now time.Time) []time.Time {
	i := 0
	for i < len(e.deaths) && now.Sub(e.deaths[i]) >= PenaltyWindow {
		i++
	}
	return e.deaths[i:]
}

// PenaltyInfo is a client key's standing in the penalty box.
type PenaltyInfo struct {
	Key string
	// Remaining is how long the key is still refused (0: not penalized).
	Remaining time.Duration
	// Deaths counts the worker deaths within the last minute the key had a
	// connection at, toward the next penalty.
	Deaths  int
	Refused uint64
}

// List returns the keys penalized now or with deaths within the window.
func (b *PenaltyBox) List(now time.Time) []PenaltyInfo {
	var out []PenaltyInfo
	for el := b.lru.Front(); el != nil; el = el.Next() {
		e := el.Value.(*penaltyEntry)
		rem := max(0, e.until.Sub(now))
		n := len(e.pruned(now))
		if rem > 0 || n > 0 {
			out = append(out, PenaltyInfo{Key: e.key.String(), Remaining: rem, Deaths: n, Refused: e.refused})
		}
	}
	return out
}

// remove forgets the entry at el.
func (b *PenaltyBox) remove(el *list.Element) {
	delete(b.entries, b.lru.Remove(el).(*penaltyEntry).key)
}

// PenaltyState is one key's penalty as an upgrade hands it on.
type PenaltyState struct {
	Key       netip.Addr
	Remaining time.Duration
}

// Export returns the keys refused now, the least recently struck first.
func (b *PenaltyBox) Export(now time.Time) []PenaltyState {
	var out []PenaltyState
	for el := b.lru.Back(); el != nil; el = el.Prev() {
		e := el.Value.(*penaltyEntry)
		if rem := e.until.Sub(now); rem > 0 {
			out = append(out, PenaltyState{Key: e.key, Remaining: rem})
		}
	}
	return out
}

// Resume refuses key for what remains of a penalty the previous supervisor
// imposed (Export), unlike Impose not counted as imported.
func (b *PenaltyBox) Resume(s PenaltyState, now time.Time) {
	n := b.imported
	b.Impose(s.Key, now.Add(s.Remaining), now)
	b.imported = n
}
