package worker

import (
	"errors"
	"os"
	"time"

	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/worker/transport"
)

// hotResult is what a hot wait found.
type hotResult uint8

const (
	hotInput   hotResult = iota // input arrived
	hotNothing                  // no wait, or none arrived: hand the connection back
	hotClosed                   // the peer closed or reset it
)

// hotWait keeps a connection whose input is used up for the hot window,
// waiting for its next request (docs/DESIGN.md §2, affinity and hot
// connections), unless a connection waits for a slot: then, or as soon as
// that happens, it hands the connection back. It reads at most what is
// there; the caller applies the complete-head rule to it.
func (cs *connServer) hotWait() hotResult {
	w := cs.w
	if w.hotWindow <= 0 || w.draining.Load() {
		return hotNothing
	}
	if w.pressure.Load() {
		cs.handback = proto.Handback_PRESSURE
		return hotNothing
	}
	if cs.tls {
		return cs.tlsHotWait()
	}
	// A next request already in the socket needs no wait, and no poller
	// (once under it, a read would wait: the registered wait below).
	pc := cs.nc.(*transport.Plain)
	if !pc.Polled() {
		pc.SetNoWait(true)
		_, err := cs.br.Peek(1)
		pc.SetNoWait(false)
		switch {
		case err == nil:
			cs.hotNext = true
			return hotInput
		case !errors.Is(err, transport.ErrWouldBlock):
			cs.outcome = proto.Outcome_PEER_CLOSED
			return hotClosed
		}
	}
	// The deadline is set once, before the connection is registered: a
	// pressure notice that finds it registered moves it to the past, and
	// one that came earlier is seen by the check below. It is under the
	// poller before it is registered, so the notice's deadline reaches the
	// wait.
	pc.Poll()
	cs.nc.SetReadDeadline(time.Now().Add(w.hotWindow))
	cs.in.setLimit(nil)
	w.hotMu.Lock()
	w.hot[cs] = struct{}{}
	w.hotMu.Unlock()
	defer func() {
		w.hotMu.Lock()
		delete(w.hot, cs)
		w.hotMu.Unlock()
	}()
	if w.pressure.Load() {
		cs.handback = proto.Handback_PRESSURE
		return hotNothing
	}
	_, err := cs.br.Peek(1)
	switch {
	case err == nil:
		cs.hotNext = true
		return hotInput
	case errors.Is(err, os.ErrDeadlineExceeded):
		cs.handback = proto.Handback_HOT_WINDOW
		if w.pressure.Load() {
			cs.handback = proto.Handback_PRESSURE
		}
		return hotNothing
	}
	cs.outcome = proto.Outcome_PEER_CLOSED
	return hotClosed
}

// tlsHotWait is hotWait for a TLS connection, whose input is records: it
// waits for the socket to hold complete records and decrypts only those,
// until the plaintext holds a decided head. A record still arriving at the
// window's end stays whole in the socket, at a record boundary, where the
// dispatcher's peek finds it; the plaintext of a partial head stays with
// the TLS state, as when a dispatch ends on one.
func (cs *connServer) tlsHotWait() hotResult {
	w := cs.w
	end := time.Now().Add(w.hotWindow)
	hot := func(on bool) {
		w.hotMu.Lock()
		if on {
			w.hot[cs] = struct{}{}
		} else {
			delete(w.hot, cs)
		}
		w.hotMu.Unlock()
	}
	for {
		// Set on every pass, as decrypting moves it; a pressure notice
		// sets its flag before moving the deadline, so one that comes
		// after this check finds the deadline to move. The connection is
		// registered for pressure only while it waits: a deadline moved
		// while crypto/tls reads a record could stop it between the
		// record's header and its body, and leave the socket off the
		// record boundary where the dispatcher peeks.
		cs.nc.SetReadDeadline(end)
		hot(true)
		if w.pressure.Load() {
			hot(false)
			cs.handback = proto.Handback_PRESSURE
			return hotNothing
		}
		err := cs.tt.WaitRecord()
		hot(false)
		if err != nil {
			cs.handback = proto.Handback_HOT_WINDOW
			switch {
			case w.pressure.Load():
				cs.handback = proto.Handback_PRESSURE
			case cs.pending() > 0:
				cs.handback = proto.Handback_PARTIAL_HEAD
			}
			return hotNothing
		}
		if cs.tlsHeadReady() {
			if cs.pending() == 0 {
				// The records ended in close_notify, an end or an error.
				cs.outcome = proto.Outcome_PEER_CLOSED
				return hotClosed
			}
			cs.hotNext = true
			return hotInput
		}
	}
}

// keyedPerRequest reports whether the dispatch serves one request: the rate
// limiter charges a trusted proxy's requests to the client X-Forwarded-For
// names, which the supervisor derives from the head it sees at each
// dispatch (docs/DESIGN.md §4.3), so a plain connection from a trusted proxy
// goes back after each request while rate limits are configured.
func (cs *connServer) keyedPerRequest() bool {
	return !cs.tls && len(cs.w.cfg.RateLimits) > 0 && cs.w.trustedPeer(cs.d.GetPeer())
}
