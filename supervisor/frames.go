package supervisor

import (
	"errors"
	"time"

	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/internal/poll"
)

// frameBatch bounds frames read from one worker per event: one flooding
// worker cannot delay another (docs/DESIGN.md §4.2).
const frameBatch = 64

// workerEvent handles readiness on a worker's channel.
func (d *dispatcher) workerEvent(id uint64, ev poll.Event, now time.Time) {
	w := d.workerFor(int(id&slotMask), id>>slotBits)
	if w == nil || w.ch == nil {
		return
	}
	if !w.sendRetryAt.IsZero() {
		// Held sends (holdSends): registered for nothing, so only a hang-up
		// is reported, and it stays reported while the worker is not read.
		if ev.HangUp {
			d.workerGone(w, "closed its channel", w.state != workerDraining)
		}
		return
	}
	if ev.Writable {
		d.flushOut(w)
		if w.ch == nil || w.wantOut {
			return
		}
	}
	if w.wantOut {
		return // replies are queued: read more once they are out
	}
	// The channel is registered level-triggered: once a receive found it
	// empty (Pending false), the loop waits for readiness rather than
	// calling again to be told so. Frames already received (Held) are
	// handled even past the bound, as no readiness would bring them back.
	for i := 0; i < frameBatch || w.ch.Held(); i++ {
		f := d.recvFrame
		if f == nil {
			f = new(proto.Frame)
			d.recvFrame = f
		}
		ipc.Reset(f)
		fd, err := w.ch.Recv(f)
		if err == ipc.ErrWouldBlock {
			return
		}
		if err != nil {
			// fe escapes to the heap (errors.As): declared here, off the
			// path of every frame.
			var fe *ipc.FrameError
			switch {
			case err == ipc.ErrClosed:
				// A draining worker closes its channel as it exits; any
				// other worker doing so is broken and is killed.
				d.workerGone(w, "closed its channel", w.state != workerDraining)
			case errors.As(err, &fe):
				d.killWorker(w, fe.Error())
			default:
				d.killWorker(w, err.Error())
			}
			return
		}
		if _, done := f.Body.(*proto.Frame_Done); !done {
			// Its handler may keep it: the next frame gets a new one.
			d.recvFrame = nil
		}
		if !d.frame(w, f, fd, now) || w.ch == nil || w.wantOut || !w.ch.Pending() {
			return
		}
	}
}
