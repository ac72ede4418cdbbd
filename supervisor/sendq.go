package supervisor

import (
	"fmt"

	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/internal/poll"
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
			if !w.wantOut {
				w.wantOut = true
				d.mod(w.ch.FD(), kindWorker, w.token(), poll.Out)
			}
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
		w.wantOut = false
		d.mod(w.ch.FD(), kindWorker, w.token(), poll.In)
	}
}

// maxIdleOutbuf bounds the send buffer a worker keeps while nothing waits.
const maxIdleOutbuf = 256 << 10

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
}
