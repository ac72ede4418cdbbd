package ipc

import (
	"context"
	"errors"
)

// ErrChannelFull reports that a channel's in-flight requests are at the cap.
// The supervisor answers such a request at once with Overloaded.
var ErrChannelFull = errors.New("ipc: in-flight requests at the channel's cap")

// InFlight is one channel's cap on requests in flight
// (ipc_max_in_flight_requests, docs/DESIGN.md §4). Both ends hold one with the
// same cap: the supervisor takes a slot with TryAcquire before it starts a
// request and releases it before the reply is written; the worker takes a
// slot with Acquire before it sends a request and releases it once the reply
// is in. A worker that waits for a slot therefore never has more requests
// outstanding than the supervisor has slots for, and is never refused.
//
// Safe for concurrent use.
type InFlight struct {
	slots chan struct{}
}

// NewInFlight returns a cap of n slots (at least 1).
func NewInFlight(n int) *InFlight {
	return &InFlight{slots: make(chan struct{}, max(1, n))}
}

// TryAcquire takes a slot, or returns ErrChannelFull at once.
func (f *InFlight) TryAcquire() error {
	select {
	case f.slots <- struct{}{}:
		return nil
	default:
		return ErrChannelFull
	}
}

// Acquire takes a slot, waiting while none is free until ctx is done.
func (f *InFlight) Acquire(ctx context.Context) error {
	select {
	case f.slots <- struct{}{}:
		return nil
	default:
	}
	select {
	case f.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Release gives back a slot taken by TryAcquire or Acquire. Releasing more
// than was taken is a bug in the caller and panics.
func (f *InFlight) Release() {
	select {
	case <-f.slots:
	default:
		panic("ipc: InFlight released more slots than were taken")
	}
}

// InUse is the number of slots taken.
func (f *InFlight) InUse() int { return len(f.slots) }

// Cap is the number of slots.
func (f *InFlight) Cap() int { return cap(f.slots) }
