package supervisor

import (
	"bytes"
	"context"
	"time"

	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/admin"
	"github.com/gatehouse-dev/gatehouse/supervisor/adminapi"
	"github.com/gatehouse-dev/gatehouse/supervisor/privileges"
	"github.com/gatehouse-dev/gatehouse/supervisor/view"
)

// The loop's state shown outside: to the admin socket, and to workers asking
// for stats. Both are made of a Snapshot, rendered by package view.

// Admin is the supervisor as its admin socket sees it, for admin.Server's
// Serve.
func (s *Supervisor) Admin() admin.Supervisor { return adminSide{s} }

// adminSide answers the admin socket's commands.
type adminSide struct{ *Supervisor }

// View takes a Snapshot, which the admin views are made of.
func (a adminSide) View(ctx context.Context) (admin.View, error) {
	snap, err := a.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	held := func() adminapi.Privileges {
		p := privileges.Report(a.separation, a.spawner)
		p.LauncherPID = a.opts.LauncherPID
		return p
	}
	return view.Admin{Snap: snap, Started: a.Started(), ConfigFile: a.ConfigPath(), Privileges: held}, nil
}

// CertificateErrors are the certificates the last reload could not load.
func (a adminSide) CertificateErrors() []string {
	var out []string
	for _, e := range a.certificateErrors() {
		out = append(out, e.Error)
	}
	return out
}

// Stats for workers (StatsRequest, which a worker sends for a client in the
// metrics allow-list): the Prometheus text is rendered off the loop and
// served from a cache at most statsMaxAge old, so however often workers ask,
// the loop copies its state at most once per statsMaxAge and never renders.

const (
	// statsMaxAge is how old a cached rendering may be when served.
	statsMaxAge = time.Second
	// statsMax keeps a StatsReply under the frame cap.
	statsMax = 60 << 10
)

// statsCache is the loop's part for stats: the last rendering, and the
// requests waiting for the next one. Each waiting request holds its
// in-flight slot until it is answered.
type statsCache struct {
	text      []byte    // the last rendering, cut to fit a frame; nil before the first
	at        time.Time // the loop's clock when its snapshot was taken
	rendering bool      // a rendering is under way
	waiting   []statsWaiter
}

// statsWaiter is a StatsRequest waiting for a rendering.
type statsWaiter struct {
	slot int
	gen  uint64
	id   uint64
}

// statsRendered carries a rendering back to the loop.
type statsRendered struct {
	text []byte
	at   time.Time
}

// serveStats answers a StatsRequest that holds a slot: from the cache when it is
// fresh, else once the rendering it starts (or one under way) is done.
func (d *dispatcher) serveStats(w *workerProc, id uint64, now time.Time) {
	if d.stats.text != nil && now.Sub(d.stats.at) <= statsMaxAge {
		w.slots.Release()
		d.sendStats(w, id)
		return
	}
	d.stats.waiting = append(d.stats.waiting, statsWaiter{slot: w.slot, gen: w.gen, id: id})
	if !d.stats.rendering {
		d.stats.rendering = true
		go d.s.renderStats(d.snapshot(now))
	}
}

// statsDone takes a rendering and answers the requests waiting for it, each
// slot released before its reply is written.
func (d *dispatcher) statsDone(m statsRendered) {
	d.stats.text, d.stats.at, d.stats.rendering = m.text, m.at, false
	for _, sw := range d.stats.waiting {
		// A worker gone meanwhile took its slots with it.
		if w := d.workerFor(sw.slot, sw.gen); w != nil && w.ch != nil {
			w.slots.Release()
			d.sendStats(w, sw.id)
		}
	}
	d.stats.waiting = nil
}

func (d *dispatcher) sendStats(w *workerProc, id uint64) {
	d.send(w, &proto.Frame{Id: id, Body: &proto.Frame_StatsReply{StatsReply: &proto.StatsReply{Text: d.stats.text}}}, -1)
}

// renderStats renders snap on its own goroutine and posts the text to the
// loop.
func (s *Supervisor) renderStats(snap view.Snapshot) {
	snap.SortClients()
	var buf bytes.Buffer
	if err := snap.WritePrometheus(&buf); err != nil {
		s.log.Error("rendering metrics", "error", err)
		buf.Reset()
		buf.WriteString("# gatehouse: rendering metrics failed; see the supervisor's log\n")
	}
	s.post(statsRendered{text: view.Cut(buf.Bytes(), statsMax), at: snap.Time})
}
