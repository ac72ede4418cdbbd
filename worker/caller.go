package worker

import (
	"context"
	"errors"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/proto"
)

// errOverloaded is a request the supervisor refused over the channel's
// in-flight cap; the client gets 503 with Retry-After.
var errOverloaded = errors.New("worker: supervisor overloaded")

// caller sends requests to the supervisor and routes replies by id. It
// never has more requests outstanding than the channel's in-flight cap: a
// request waits for a slot, and its slot is free again only once its reply
// is in (also when the caller gave up on it earlier), so the supervisor,
// which releases its slot before it writes the reply, never refuses one.
type caller struct {
	ch    *ipc.Stream
	slots *ipc.InFlight // set from Hello, before any request

	mu      sync.Mutex // guards next and pending
	next    uint64
	pending map[uint64]*pendingCall
}

// pendingCall is a request waiting for its reply. orphan cleans up a reply
// that arrives after the caller gave up (a descriptor to close, an upstream
// to release).
type pendingCall struct {
	done      chan reply
	orphan    func(reply)
	abandoned bool // the caller gave up; the reply goes to orphan
}

func closeReply(r reply) { closeFD(r.fd) }

// reply is one supervisor reply and the descriptor that came with it (-1).
type reply struct {
	f  *proto.Frame
	fd int
}

// call waits for an in-flight slot, sends a request frame (its Id is set
// here) and waits for its reply. The caller owns a returned descriptor.
// orphan (nil: close the descriptor) handles a reply that comes after ctx is
// done.
func (c *caller) call(ctx context.Context, f *proto.Frame, orphan func(reply)) (reply, error) {
	if orphan == nil {
		orphan = closeReply
	}
	if err := c.slots.Acquire(ctx); err != nil {
		return reply{fd: -1}, err
	}
	return c.send(ctx, f, orphan)
}

// callNow is call without waiting for an in-flight slot: with none free it
// fails at once with errOverloaded.
func (c *caller) callNow(ctx context.Context, f *proto.Frame) (reply, error) {
	if c.slots.TryAcquire() != nil {
		return reply{fd: -1}, errOverloaded
	}
	return c.send(ctx, f, closeReply)
}

// send sends a request whose in-flight slot is taken and waits for its
// reply.
func (c *caller) send(ctx context.Context, f *proto.Frame, orphan func(reply)) (reply, error) {
	done := make(chan reply, 1)
	c.mu.Lock()
	c.next++
	id := c.next
	if c.pending == nil {
		c.pending = make(map[uint64]*pendingCall)
	}
	c.pending[id] = &pendingCall{done: done, orphan: orphan}
	c.mu.Unlock()
	f.Id = id
	if err := c.ch.Send(f, -1); err != nil {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		c.slots.Release()
		return reply{fd: -1}, err
	}
	select {
	case r := <-done:
		if r.f.GetOverloaded() != nil {
			return reply{fd: -1}, errOverloaded
		}
		return r, nil
	case <-ctx.Done():
		c.mu.Lock()
		p, ok := c.pending[id]
		if ok {
			// The request stays outstanding at the supervisor, and
			// keeps its slot, until its reply comes.
			p.abandoned = true
		}
		c.mu.Unlock()
		if !ok {
			// The reply raced the cancellation: it is in done.
			orphan(<-done)
		}
		return reply{fd: -1}, ctx.Err()
	}
}

// deliver hands a reply to its caller, or to its orphan handler when the
// caller gave up, and frees the request's slot. A reply nobody asked for is
// closed.
func (c *caller) deliver(r reply) {
	c.mu.Lock()
	p, ok := c.pending[r.f.GetId()]
	delete(c.pending, r.f.GetId())
	abandoned := ok && p.abandoned
	c.mu.Unlock()
	if !ok {
		closeReply(r)
		return
	}
	c.slots.Release()
	if abandoned {
		// On its own goroutine: an orphan may send (an upstream
		// release), and the frame reader never blocks on a send.
		go p.orphan(r)
		return
	}
	p.done <- r
}

// closeFD closes a descriptor that came with a frame, if one did (-1: none).
func closeFD(fd int) {
	if fd >= 0 {
		unix.Close(fd)
	}
}
