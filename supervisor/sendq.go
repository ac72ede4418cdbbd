package supervisor

import (
	"fmt"
	"time"

	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/internal/poll"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// send queues a frame for a worker (sendEncoded). The dispatcher keeps its
// descriptor fd (a client connection it dispatches).
func (d *dispatcher) send(w *workerProc, f *proto.Frame, fd int) { d.sendFD(w, f, fd, false) }

// sendOwned is send for a descriptor the dispatcher gives away (a dialed
// upstream, a closing connection): it is closed once sent, or when the
// worker is gone.
func (d *dispatcher) sendOwned(w *workerProc, f *proto.Frame, fd int) { d.sendFD(w, f, fd, true) }

func (d *dispatcher) sendFD(w *workerProc, f *proto.Frame, fd int, owned bool) {
	if w.ch == nil {
		if owned {
			unix.Close(fd)
		}
		return
	}
	b, err := ipc.Marshal(d.sendBuf, f)
	if err != nil {
		// Only a frame the dispatcher built wrong is refused; the worker
		// is not to blame, but it would miss the frame: replace it.
		if owned {
			unix.Close(fd)
		}
		d.workerGone(w, err.Error(), true)
		return
	}
	d.sendBuf = b
	d.sendEncoded(w, b, fd, owned)
}

// sendEncoded queues an encoded frame for w; b is the caller's and is
// copied. The frames the loop queues in one wake-up leave together at its
// end (flushSends), those to one worker in one sendmmsg where the socket
// takes them (docs/DESIGN.md §4.1). While the channel is full the
// dispatcher stops reading the worker's frames (its interest is writable
// only): a worker that does not read its replies cannot make the
// dispatcher buffer more, so the queue stays bounded by what one batch of
// frames can produce, and the in-flight cap.
func (d *dispatcher) sendEncoded(w *workerProc, b []byte, fd int, owned bool) {
	if w.ch == nil {
		if owned {
			unix.Close(fd)
		}
		return
	}
	w.outq = append(w.outq, outFrame{off: len(w.outbuf), end: len(w.outbuf) + len(b), fd: fd, owned: owned})
	w.outbuf = append(w.outbuf, b...)
	if !w.flushing {
		w.flushing = true
		d.toFlush = append(d.toFlush, w)
	}
}

// flushSends sends what the loop queued in this wake-up, before it waits
// again. A worker lost to a failed send closes connections, which may queue
// frames for others: they are sent in the same pass.
func (d *dispatcher) flushSends() {
	for i := 0; i < len(d.toFlush); i++ {
		w := d.toFlush[i]
		d.toFlush[i] = nil
		w.flushing = false
		if w.ch != nil && !w.wantOut {
			d.flushOut(w)
		}
	}
	d.toFlush = d.toFlush[:0]
}

// flushOut sends w's queue, MaxBatch frames a call, until it is empty or
// the channel is full; then the channel is watched for writability.
func (d *dispatcher) flushOut(w *workerProc) {
	for len(w.outq) > 0 {
		outs := d.outs[:0]
		for _, o := range w.outq[:min(len(w.outq), ipc.MaxBatch)] {
			outs = append(outs, ipc.Out{B: w.outbuf[o.off:o.end], FD: o.fd})
		}
		d.outs = outs
		n, err := w.ch.SendBatch(outs)
		clear(outs)
		if err == ipc.ErrWouldBlock {
			if !w.wantOut || !w.sendRetryAt.IsZero() {
				w.wantOut, w.sendRetryAt = true, time.Time{}
				d.mod(w.ch.FD(), kindWorker, w.token(), poll.Out)
			}
			return
		}
		if err == ipc.ErrTryLater {
			d.holdSends(w)
			return
		}
		if err == ipc.ErrClosed {
			// As on the receiving side: a draining worker closes its
			// channel as it exits, and is reaped as exited, not killed
			// on its way out (a frame of the shutdown, a ping, finding
			// the channel closed).
			d.workerGone(w, "closed its channel", w.state != workerDraining)
			return
		}
		if err != nil {
			d.workerGone(w, fmt.Sprintf("sending to worker: %v", err), true)
			return
		}
		d.c.sendBatches++
		w.sendHeldSince = time.Time{}
		for _, o := range w.outq[:n] {
			if o.owned {
				unix.Close(o.fd)
			}
		}
		w.outq = append(w.outq[:0], w.outq[n:]...)
	}
	w.outq = w.outq[:0]
	w.outbuf = w.outbuf[:0]
	if cap(w.outbuf) > maxIdleOutbuf {
		// A large carried input passed once; it is not kept.
		w.outbuf = nil
	}
	if w.wantOut {
		w.wantOut, w.sendRetryAt = false, time.Time{}
		d.mod(w.ch.FD(), kindWorker, w.token(), poll.In)
	}
}

// maxIdleOutbuf bounds the send buffer a worker keeps while nothing waits.
const maxIdleOutbuf = 256 << 10

const (
	// sendRetryDelay is how long a send the kernel refused for now waits
	// before it is tried again: no readiness says when descriptors in
	// flight were received, so the clock does.
	sendRetryDelay = 10 * time.Millisecond
	// sendHoldMax bounds how long a worker's frames wait on such refusals
	// in a row before the worker is given up, as on any failed send: its
	// connections wait meanwhile.
	sendHoldMax = 2 * time.Second
)

// holdSends keeps w's queue when the kernel refused to take it for now
// (ipc.ErrTryLater: in Linux, more descriptors in flight for the
// supervisor's account than its descriptor limit, which other processes of
// the account count towards too). It is tried again after sendRetryDelay
// (retrySends), and until then the dispatcher reads no more of w's frames,
// as while its channel is full, so the queue stays as bounded. Refusals for
// sendHoldMax in a row give the worker up.
func (d *dispatcher) holdSends(w *workerProc) {
	now := d.s.now()
	if w.sendHeldSince.IsZero() {
		w.sendHeldSince = now
	} else if now.Sub(w.sendHeldSince) >= sendHoldMax {
		d.workerGone(w, fmt.Sprintf("sending to worker refused for %v: %v", sendHoldMax, ipc.ErrTryLater), true)
		return
	}
	d.c.sendRetries++
	d.logLimited(hclog.Warn, "send-retry", "sending to a worker refused for now; retrying", "worker", w.slot, "pid", w.pid)
	if w.sendRetryAt.IsZero() {
		// Registered for nothing, not even writability (a channel
		// watched for it since a full one would report it at every wait):
		// only the clock ends this wait.
		w.wantOut = true
		d.mod(w.ch.FD(), kindWorker, w.token(), 0)
	}
	w.sendRetryAt = now.Add(sendRetryDelay)
}

// retrySends tries again the sends held by holdSends whose time came.
// flushOut ends the hold: its queue sent, a full channel watched for
// writability, another refusal held anew, or the worker gone.
func (d *dispatcher) retrySends(now time.Time) {
	for _, w := range d.workers {
		if !w.sendRetryAt.IsZero() && !now.Before(w.sendRetryAt) && w.ch != nil {
			d.flushOut(w)
		}
	}
}

// dropOut discards a gone worker's queue, closing the descriptors it owned.
func dropOut(w *workerProc) {
	for _, o := range w.outq {
		if o.owned {
			unix.Close(o.fd)
		}
	}
	w.outq = nil
	w.outbuf = nil
	w.wantOut = false
	w.sendRetryAt, w.sendHeldSince = time.Time{}, time.Time{}
}
