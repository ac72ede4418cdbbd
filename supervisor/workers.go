package supervisor

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/internal/poll"
	"golang.org/x/sys/unix"
)

// newWorker makes a slot for a worker of the current spec, not yet started.
func (d *dispatcher) newWorker() *workerProc {
	w := &workerProc{slot: d.nextSlot, spec: d.spec, state: workerDead, exited: true}
	d.nextSlot++
	return w
}

// startWorker launches a process for slot w on its own goroutine.
func (d *dispatcher) startWorker(w *workerProc, now time.Time) {
	w.gen++
	w.state = workerStarting
	w.exited = false
	w.started = now
	w.servedAtStart = w.served
	w.rounds = 0
	w.inFlight = 0
	go d.s.spawnWorker(w.slot, w.gen, w.spec)
}

func (d *dispatcher) workerFor(slot int, gen uint64) *workerProc {
	for _, w := range d.workers {
		if w.slot == slot {
			if w.gen != gen {
				return nil
			}
			return w
		}
	}
	return nil
}

// spawned attaches a started process's channel, or schedules a retry.
func (d *dispatcher) spawned(m spawnResult, now time.Time) {
	w := d.workerFor(m.slot, m.gen)
	if w == nil {
		if m.ch != nil {
			m.ch.Close()
			m.proc.Kill()
		}
		return
	}
	if m.err != nil {
		d.log.Error("starting worker", "worker", w.slot, "error", m.err)
		w.exited = true
		d.scheduleRespawn(w, now)
		return
	}
	w.ch, w.proc, w.pid = m.ch, m.proc, m.proc.Pid
	w.lastPong = now
	if err := d.add(w.ch.FD(), kindWorker, w.token(), poll.In); err != nil {
		d.killWorker(w, err.Error())
		return
	}
	if d.stopping {
		d.killWorker(w, "shutting down")
		return
	}
	cfg := w.spec.cfg
	d.send(w, &proto.Frame{Body: &proto.Frame_Hello{Hello: &proto.Hello{
		WorkerId:    uint32(w.slot),
		Config:      cfg.Source,
		ConfigName:  cfg.Filename,
		Concurrency: uint32(cfg.Workers.Concurrency),
		BaseDir:     cfg.BaseDir,
	}}}, -1)
	if d.logLevel != "" {
		d.send(w, &proto.Frame{Body: &proto.Frame_LogLevel{LogLevel: &proto.LogLevel{Level: d.logLevel}}}, -1)
	}
}

// exited records a reaped worker process.
func (d *dispatcher) exited(m exitResult, now time.Time) {
	w := d.workerFor(m.slot, m.gen)
	if w == nil {
		return
	}
	w.exited = true
	w.proc = nil
	if (d.stopping || w.state == workerDraining) && m.signal == 0 && m.code == 0 {
		d.log.Info("worker exited", "worker", w.slot, "pid", w.pid)
	} else {
		d.c.workerDeaths++
		if m.signal != 0 {
			d.c.workerDeathsBySignal[m.signal]++
		}
		d.log.Error("worker died", "worker", w.slot, "pid", w.pid, "status", m.status)
	}
	d.workerGone(w, m.status, false)
	if w.retiring && !d.stopping {
		d.workers = slices.DeleteFunc(d.workers, func(x *workerProc) bool { return x == w })
		d.roll(now)
	}
}

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
	var f proto.Frame
	for i := 0; i < frameBatch; i++ {
		f.Reset()
		fd, err := w.ch.Recv(&f)
		if err != nil {
			var fe *ipc.FrameError
			switch {
			case err == ipc.ErrWouldBlock:
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
		if fd >= 0 {
			// ipc admits a descriptor only on a Dispatch, which a worker
			// never sends; close it before reporting the violation.
			unix.Close(fd)
		}
		if !d.frame(w, &f, now) || w.ch == nil || w.wantOut {
			return
		}
	}
}

// frame handles one frame from a worker. It reports false when the worker was
// killed for it.
func (d *dispatcher) frame(w *workerProc, f *proto.Frame, now time.Time) bool {
	switch b := f.Body.(type) {
	case *proto.Frame_Ready:
		if w.state != workerStarting {
			d.killWorker(w, "Ready when not starting")
			return false
		}
		w.state = workerReady
		w.layers = append(append([]*proto.SandboxLayer(nil), w.spec.layers...), b.Ready.GetLayers()...)
		d.log.Info("worker ready", "worker", w.slot, "pid", w.pid, "sandbox", layerSummary(w.layers))
		d.checkReady()
		d.roll(now)
		d.pump(nil, now)
	case *proto.Frame_Done:
		return d.done(w, b.Done, now)
	case *proto.Frame_Pong:
		w.lastPong = now
	case *proto.Frame_Dial, *proto.Frame_RateCheck, *proto.Frame_StatsRequest, *proto.Frame_UpstreamRelease:
		return d.request(w, f, now)
	default:
		d.killWorker(w, fmt.Sprintf("unexpected frame %T", f.Body))
		return false
	}
	return true
}

// done takes a connection back from a worker (SPEC §2 item 6): the slots are
// released first, then it is re-parked, re-dispatched with its carried input,
// lingered or closed.
func (d *dispatcher) done(w *workerProc, m *proto.Done, now time.Time) bool {
	c := d.conns[m.GetConnId()]
	switch {
	case c == nil || c.state != stateAtWorker || c.worker != w:
		d.killWorker(w, fmt.Sprintf("Done for connection %d it does not hold", m.GetConnId()))
		return false
	case m.GetKept():
		d.killWorker(w, "Done keeps a descriptor; affinity is not enabled")
		return false
	case len(m.GetCarried()) > ipc.MaxCarried:
		d.killWorker(w, "Done carries more than the carried-bytes cap")
		return false
	case m.GetOutcome() < 0 || int(m.GetOutcome()) >= len(d.c.outcomes):
		d.killWorker(w, "Done with an unknown outcome")
		return false
	case len(m.GetResponses()) > int(m.GetRequests()-min(m.GetRequests(), c.requests))+1:
		d.killWorker(w, "Done reports more responses than requests")
		return false
	case m.GetRequests() < c.requests:
		d.killWorker(w, "Done lowers the request count")
		return false
	}
	served := uint64(m.GetRequests() - c.requests)
	w.served += served
	w.rounds++
	d.c.requests += served
	if max := uint64(w.spec.cfg.Workers.MaxRoundsPerWorker); max > 0 && w.rounds >= max && !w.retiring {
		// Recycled: replaced before it leaves.
		w.retiring = true
		d.log.Info("recycling worker", "worker", w.slot, "pid", w.pid, "rounds", w.rounds)
		defer d.roll(now)
	}
	c.requests = m.GetRequests()
	if c.fresh && c.requests > 0 {
		c.fresh = false
		d.queued--
	}
	d.c.outcomes[m.GetOutcome()]++
	for _, r := range m.GetResponses() {
		d.c.observe(r.GetStatus(), r.GetMicros())
	}
	if m.GetOutcome() == proto.Outcome_PEER_RESET {
		d.logLimited("peer-reset", "client reset a connection mid-round")
	}
	d.release(c)
	d.pump(c.client, now)
	switch m.GetDisposition() {
	case proto.Disposition_KEEP_ALIVE:
		switch {
		case d.stopping:
			d.closeConn(c)
		case len(m.GetCarried()) > 0:
			c.carried = append([]byte(nil), m.GetCarried()...)
			d.tryDispatch(c, now)
		default:
			d.park(c, now)
		}
	case proto.Disposition_CLOSE:
		d.closeConn(c)
	case proto.Disposition_LINGER:
		if d.stopping {
			d.closeConn(c)
		} else {
			d.linger(c, now)
		}
	default:
		d.killWorker(w, "Done without a disposition")
		return false
	}
	return true
}

// killWorker ends a worker for a protocol violation or unresponsiveness.
func (d *dispatcher) killWorker(w *workerProc, reason string) {
	d.c.workerKills++
	d.log.Error("killing worker", "worker", w.slot, "pid", w.pid, "reason", reason)
	d.workerGone(w, reason, true)
}

// workerGone detaches a worker: its channel is closed, every connection it
// held is closed and its slots released (SPEC §2 item 7); it is respawned with
// backoff once reaped.
func (d *dispatcher) workerGone(w *workerProc, reason string, kill bool) {
	now := time.Now()
	if kill && w.proc != nil {
		w.proc.Kill()
	}
	if w.state != workerDead {
		d.scheduleRespawn(w, now)
	}
	if w.ch != nil {
		d.del(w.ch.FD())
		w.ch.Close()
		w.ch = nil
		dropOut(w)
		d.releaseUpstreams(w)
		for _, c := range d.conns {
			if c.worker == w {
				cl := c.client
				d.closeConn(c)
				d.pump(cl, now)
			}
		}
	}
	d.pump(nil, now)
}

func (d *dispatcher) scheduleRespawn(w *workerProc, now time.Time) {
	w.state = workerDead
	if d.stopping || w.retiring {
		return
	}
	switch {
	case w.served == w.servedAtStart:
		// Died before serving a request: likely a broken build or
		// configuration, which respawning quickly cannot fix (Postfix
		// throttles such a service the same way).
		w.backoff = throttleDelay
	case w.backoff == 0 || now.Sub(w.started) >= healthyUptime:
		w.backoff = backoffMin
	default:
		w.backoff = min(2*w.backoff, backoffMax)
	}
	w.restarts++
	w.retryAt = now.Add(w.backoff)
}

// roll moves the worker set toward the configuration: one new worker
// starting at a time while fewer than workers.count are live, and retiring
// workers kept serving only while they stand in for replacements that are
// not ready yet; the rest drain, finish their rounds and exit.
func (d *dispatcher) roll(now time.Time) {
	if d.stopping {
		return
	}
	target := d.cfg.Workers.Count
	live, starting, ready := 0, 0, 0
	var retiring []*workerProc
	for _, w := range d.workers {
		switch {
		case w.retiring:
			if w.state == workerReady || w.state == workerStarting {
				retiring = append(retiring, w)
			}
		default:
			live++
			switch w.state {
			case workerStarting:
				starting++
			case workerReady:
				ready++
			}
		}
	}
	for i, w := range retiring {
		if i < target-ready && w.state == workerReady {
			continue // still standing in
		}
		d.drainWorker(w)
	}
	if starting == 0 && live < target {
		w := d.newWorker()
		d.workers = append(d.workers, w)
		d.startWorker(w, now)
	}
}

// drainWorker stops dispatching to w and asks it to finish and exit.
func (d *dispatcher) drainWorker(w *workerProc) {
	if w.ch == nil {
		return
	}
	w.state = workerDraining
	d.send(w, &proto.Frame{Body: &proto.Frame_Drain{Drain: &proto.Drain{}}}, -1)
}

// checkReady closes the Ready channel once every worker is ready.
func (d *dispatcher) checkReady() {
	for _, w := range d.workers {
		if w.state != workerReady && !w.retiring {
			return
		}
	}
	d.s.once.Do(func() { close(d.s.ready) })
}

func layerSummary(layers []*proto.SandboxLayer) string {
	s := ""
	for i, l := range layers {
		if i > 0 {
			s += ","
		}
		mark := "+"
		if !l.GetApplied() {
			mark = "-"
		}
		s += mark + l.GetName()
	}
	return s
}
