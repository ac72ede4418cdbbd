package upstream

import (
	"time"

	"golang.org/x/sys/unix"
)

// Giving back: releases, a worker's death, the Reclaims sent when the
// budget is spent, and the dials waiting for what they bring back.

// Holds reports whether w holds connection conn to upstream name: what an
// UpstreamRelease must name.
func (b *Broker) Holds(w Worker, conn uint64, name string) bool {
	h := b.workers[w]
	if h == nil {
		return false
	}
	hc, ok := h.conns[conn]
	return ok && hc.upstream == name
}

// Release handles w's release of connection conn to upstream name (which it
// Holds): the supervisor's copy is shut down and closed before the
// connection counts as free.
func (b *Broker) Release(w Worker, conn uint64, name string, now time.Time) {
	h := b.workers[w]
	hc := h.conns[conn]
	delete(h.conns, conn)
	shutClose(hc.fd)
	b.heldFDs--
	h.held[name]--
	if u := b.upstreams[name]; u != nil {
		u.held--
		b.freed(u, now)
	}
}

// shutClose shuts a socket down for every descriptor of it, then closes ours.
func shutClose(fd int) {
	unix.Shutdown(fd, unix.SHUT_RDWR)
	unix.Close(fd)
}

// Gone kills the upstream connections of a worker process that is gone:
// any copy of them it passed on is dead too. The results of its dials under
// way are dropped when they come.
func (b *Broker) Gone(w Worker, now time.Time) {
	h := b.workers[w]
	if h == nil {
		return
	}
	delete(b.workers, w)
	h.gone = true
	freed := map[string]bool{}
	for _, hc := range h.conns {
		shutClose(hc.fd)
		b.heldFDs--
		if u := b.upstreams[hc.upstream]; u != nil {
			u.held--
			freed[hc.upstream] = true
		}
	}
	h.conns, h.held, h.reclaiming = nil, nil, nil
	for name := range freed {
		b.freed(b.upstreams[name], now)
	}
}

// reclaimFor asks every other worker holding connections to u to close its
// idle ones. It reports whether any answer is to come.
func (b *Broker) reclaimFor(u *upstreamState, requester Worker) bool {
	name := u.cfg.Name
	pending := false
	for o, h := range b.workers {
		if o == requester || !o.Reclaimable() {
			continue
		}
		if h.reclaiming[name] {
			pending = true
			continue
		}
		holds := false
		for _, hc := range h.conns {
			if hc.upstream == name {
				holds = true
				break
			}
		}
		if !holds {
			continue
		}
		if h.reclaiming == nil {
			h.reclaiming = make(map[string]bool)
		}
		h.reclaiming[name] = true
		u.reclaims++
		o.Reclaim(name)
		pending = true
	}
	return pending
}

// Reclaiming reports whether w was sent a Reclaim for upstream name and has
// not answered it: what a Reclaimed must follow.
func (b *Broker) Reclaiming(w Worker, name string) bool {
	h := b.workers[w]
	return h != nil && h.reclaiming[name]
}

// Reclaimed handles w's answer to a Reclaim it was sent (Reclaiming); its
// releases came first.
func (b *Broker) Reclaimed(w Worker, name string, now time.Time) {
	delete(b.workers[w].reclaiming, name)
	if u := b.upstreams[name]; u != nil {
		b.freed(u, now)
	}
}

// freed serves u's waiting dials in order once the budget allows, and
// refuses those past their wait or with nothing more to come back.
func (b *Broker) freed(u *upstreamState, now time.Time) {
	for len(u.waiting) > 0 {
		wd := u.waiting[0]
		switch {
		case wd.h.gone:
		case u.held+u.dialing < u.cfg.MaxConnections && wd.h.held[u.cfg.Name] < b.share(u):
			b.startDial(u, wd.w, wd.h, wd.id, nil, now)
		case now.Before(wd.deadline) && b.reclaimPending(u):
			return
		default:
			refuse(wd.w, wd.id, "upstream at max_connections")
		}
		u.waiting = u.waiting[1:]
	}
	u.waiting = nil
}

// reclaimPending reports whether a worker has yet to answer a Reclaim for u.
func (b *Broker) reclaimPending(u *upstreamState) bool {
	for _, h := range b.workers {
		if h.reclaiming[u.cfg.Name] {
			return true
		}
	}
	return false
}

// Expire refuses the waiting dials past their wait.
func (b *Broker) Expire(now time.Time) {
	for _, u := range b.upstreams {
		if len(u.waiting) > 0 && !now.Before(u.waiting[0].deadline) {
			b.freed(u, now)
		}
	}
}

// Deadline is the earliest waiting dial's deadline, or zero.
func (b *Broker) Deadline() time.Time {
	var t time.Time
	for _, u := range b.upstreams {
		if len(u.waiting) > 0 && (t.IsZero() || u.waiting[0].deadline.Before(t)) {
			t = u.waiting[0].deadline
		}
	}
	return t
}
