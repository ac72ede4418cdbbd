package supervisor

import (
	"fmt"
	"slices"

	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/internal/poll"
	"golang.org/x/sys/unix"
)

// outFrame is an encoded frame that found the channel full, with the
// descriptor to send along (-1 for none). The dispatcher keeps its own copy
// of the descriptor.
type outFrame struct {
	b     []byte
	fd    int
	owned bool // fd is closed once sent
}

// send writes a frame to a worker, queueing it when the channel is full. The
// dispatcher keeps its descriptor fd (a client connection it dispatches).
func (d *dispatcher) send(w *workerProc, f *proto.Frame, fd int) { d.sendFD(w, f, fd, false) }

// sendOwned is send for a descriptor the dispatcher gives away (a dialed
// upstream): it is closed once sent, or when the worker is gone.
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

// sendEncoded writes an encoded frame, or queues a copy of it while the
// channel is full. While anything is queued the dispatcher stops reading
// the worker's frames (its interest is writable only): a worker that does
// not read its replies cannot make the dispatcher buffer more, so the
// queue stays bounded by what one batch of frames can produce, and the
// in-flight cap. b is the caller's; only a queued frame is copied.
func (d *dispatcher) sendEncoded(w *workerProc, b []byte, fd int, owned bool) {
	if len(w.outq) == 0 {
		err := w.ch.SendEncoded(b, fd)
		if err == nil {
			if owned {
				unix.Close(fd)
			}
			return
		}
		if err != ipc.ErrWouldBlock {
			if owned {
				unix.Close(fd)
			}
			d.workerGone(w, fmt.Sprintf("sending to worker: %v", err), true)
			return
		}
	}
	w.outq = append(w.outq, outFrame{b: slices.Clone(b), fd: fd, owned: owned})
	if !w.wantOut {
		w.wantOut = true
		d.mod(w.ch.FD(), kindWorker, w.token(), poll.Out)
	}
}

func (d *dispatcher) flushOut(w *workerProc) {
	for len(w.outq) > 0 {
		o := w.outq[0]
		err := w.ch.SendEncoded(o.b, o.fd)
		if err == ipc.ErrWouldBlock {
			return
		}
		if o.owned {
			unix.Close(o.fd)
		}
		w.outq[0] = outFrame{}
		w.outq = w.outq[1:]
		if err != nil {
			d.workerGone(w, fmt.Sprintf("sending to worker: %v", err), true)
			return
		}
	}
	w.outq = nil
	w.wantOut = false
	d.mod(w.ch.FD(), kindWorker, w.token(), poll.In)
}

// dropOut discards a gone worker's queue, closing the descriptors it owned.
func dropOut(w *workerProc) {
	for _, o := range w.outq {
		if o.owned {
			unix.Close(o.fd)
		}
	}
	w.outq = nil
	w.wantOut = false
}
