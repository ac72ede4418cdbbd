package supervisor

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/internal/poll"
	"github.com/gatehouse-dev/gatehouse/supervisor/logrelay"
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
	if ev.Writable {
		d.flushOut(w)
		if w.ch == nil || w.wantOut {
			return
		}
	}
	if w.wantOut {
		return // replies are queued: read more once they are out
	}
	for i := 0; i < frameBatch; i++ {
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
		if !d.frame(w, f, fd, now) || w.ch == nil || w.wantOut {
			return
		}
	}
}

// ready handles a worker's Ready (frameTable has checked it). A worker asked
// to drain while it was starting still reports Ready once, and then exits.
func (d *dispatcher) ready(w *workerProc, m *proto.Ready, now time.Time) {
	layers, _ := readyLayers(m.GetLayers())
	w.reportedReady = true
	w.threads = int(m.GetThreads())
	w.layers = append(append([]*proto.SandboxLayer(nil), w.spec.layers...), layers...)
	if w.state == workerDraining {
		return
	}
	w.state = workerReady
	d.log.Info("worker ready", "worker", w.slot, "pid", w.pid, "sandbox", layerSummary(w.layers))
	d.checkReady()
	d.roll(now)
	d.pump(nil, now)
}

// Bounds on the sandbox report in a Ready frame.
const (
	maxReadyLayers = 32
	maxLayerName   = 32
	maxLayerDetail = 512
)

// readyLayers checks the sandbox layers a worker reports, which operators
// see in the log and in gatehousectl: a name is lower-case letters, digits
// and '_' (never "namespace/...", which only the supervisor reports), and a
// detail is cut and Go-quoted when it holds anything but printable ASCII. It
// returns the layers to keep, or the violation.
func readyLayers(in []*proto.SandboxLayer) ([]*proto.SandboxLayer, string) {
	if len(in) > maxReadyLayers {
		return nil, fmt.Sprintf("Ready reports %d sandbox layers", len(in))
	}
	out := make([]*proto.SandboxLayer, 0, len(in))
	for _, l := range in {
		name := l.GetName()
		if !layerName(name) {
			return nil, fmt.Sprintf("Ready reports a sandbox layer named %.40q", name)
		}
		detail := l.GetDetail()
		if len(detail) > maxLayerDetail {
			detail = detail[:maxLayerDetail]
		}
		if !logrelay.PlainText(detail) {
			detail = strconv.Quote(detail)
		}
		out = append(out, &proto.SandboxLayer{Name: name, Applied: l.GetApplied(), Detail: detail})
	}
	return out, ""
}

// layerName reports whether name may name a worker's sandbox layer.
func layerName(name string) bool {
	if name == "" || len(name) > maxLayerName || name[0] < 'a' || name[0] > 'z' {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}
