package worker

import (
	"errors"
	"os"
	"time"

	"github.com/gatehouse-dev/gatehouse/proto"
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
	if w.hotWindow <= 0 || w.draining.Load() || cs.tls {
		// A TLS connection is parked between requests, its state kept
		// here (affinity).
		return hotNothing
	}
	if w.pressure.Load() {
		cs.handback = proto.Handback_PRESSURE
		return hotNothing
	}
	// The deadline is set once, before the connection is registered: a
	// pressure notice that finds it registered moves it to the past, and
	// one that came earlier is seen by the check below.
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
		cs.hotRequests++
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
