package worker

import (
	"context"
	"errors"
	"sync"

	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/proto"
)

// errOverloaded is a request the supervisor refused over the channel's
// in-flight cap; the client gets 503 with Retry-After.
var errOverloaded = errors.New("worker: supervisor overloaded")

// caller sends requests to the supervisor and routes replies by id.
type caller struct {
	ch *ipc.Stream

	mu      sync.Mutex // guards next and pending
	next    uint64
	pending map[uint64]pendingCall
}

// pendingCall is a request waiting for its reply. orphan cleans up a reply
// that arrives after the caller gave up (a descriptor to close, an upstream
// to release).
type pendingCall struct {
	done   chan reply
	orphan func(reply)
}

func closeReply(r reply) { closeFD(r.fd) }

// reply is one supervisor reply and the descriptor that came with it (-1).
type reply struct {
	f  *proto.Frame
	fd int
}

// call sends a request frame (its Id is set here) and waits for its reply.
// The caller owns a returned descriptor. orphan (nil: close the descriptor)
// handles a reply that comes after ctx is done.
func (c *caller) call(ctx context.Context, f *proto.Frame, orphan func(reply)) (reply, error) {
	if orphan == nil {
		orphan = closeReply
	}
	done := make(chan reply, 1)
	c.mu.Lock()
	c.next++
	id := c.next
	if c.pending == nil {
		c.pending = make(map[uint64]pendingCall)
	}
	c.pending[id] = pendingCall{done: done, orphan: orphan}
	c.mu.Unlock()
	f.Id = id
	if err := c.ch.Send(f, -1); err != nil {
		c.forget(id)
		return reply{fd: -1}, err
	}
	select {
	case r := <-done:
		if r.f.GetOverloaded() != nil {
			return reply{fd: -1}, errOverloaded
		}
		return r, nil
	case <-ctx.Done():
		if !c.forget(id) {
			// The reply raced the cancellation: it is in done.
			orphan(<-done)
		}
		return reply{fd: -1}, ctx.Err()
	}
}

// forget drops a pending call; it reports whether it was still pending.
func (c *caller) forget(id uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.pending[id]
	delete(c.pending, id)
	return ok
}

// deliver hands a reply to its caller. A reply nobody asked for is closed.
func (c *caller) deliver(r reply) {
	c.mu.Lock()
	p, ok := c.pending[r.f.GetId()]
	delete(c.pending, r.f.GetId())
	c.mu.Unlock()
	if !ok {
		closeReply(r)
		return
	}
	p.done <- r
}
