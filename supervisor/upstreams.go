package supervisor

import (
	"time"

	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/upstream"
	"github.com/gatehouse-dev/gatehouse/supervisor/view"
)

// upWorker is a worker process as the upstream broker sees it: the loop's
// record of the slot and the generation of its process, which a broker
// keeps apart from the slot's earlier and later processes.
type upWorker struct {
	d   *dispatcher
	w   *workerProc
	gen uint64
}

var _ upstream.Worker = upWorker{}

// up is w's current process for the upstream broker.
func (d *dispatcher) up(w *workerProc) upWorker { return upWorker{d: d, w: w, gen: w.gen} }

// DialReply releases the request's in-flight slot, counts a refusal or an
// error, and sends the reply, giving fd away.
func (u upWorker) DialReply(id uint64, r *proto.DialReply, fd int) {
	u.w.slots.Release()
	switch {
	case r.GetRefused():
		u.d.c.upstreamRefused++
	case r.GetError() != "":
		u.d.c.upstreamErrors++
	}
	f := &proto.Frame{Id: id, Body: &proto.Frame_DialReply{DialReply: r}}
	if fd >= 0 {
		u.d.sendOwned(u.w, f, fd)
		return
	}
	u.d.send(u.w, f, -1)
}

// Reclaimable reports whether the process can be sent a Reclaim: it is
// attached and serving or draining.
func (u upWorker) Reclaimable() bool {
	return u.w.ch != nil && (u.w.state == workerReady || u.w.state == workerDraining)
}

// Reclaim sends the process a Reclaim for upstream.
func (u upWorker) Reclaim(name string) {
	u.d.send(u.w, &proto.Frame{Body: &proto.Frame_Reclaim{Reclaim: &proto.Reclaim{Upstream: name}}}, -1)
}

// upstreamInfo reports every upstream's budget and addresses, by name.
func (d *dispatcher) upstreamInfo(now time.Time) []view.UpstreamInfo {
	return d.upstreams.Info(now)
}
