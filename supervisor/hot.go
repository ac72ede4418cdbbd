package supervisor

import (
	"strings"

	"github.com/gatehouse-dev/gatehouse/proto"
)

// Hot connections (docs/DESIGN.md §2, affinity and hot connections): a worker
// may keep a kept-alive connection for a short window after a response,
// waiting for its next request, but only while no readable connection waits
// for a slot. The dispatcher tells the workers when that changes with a
// Pressure frame, so a hot connection costs no frame per request and is
// handed back at once when anyone waits. A hot connection counts as out for
// the pool and the share, as any dispatched one.

// pressured reports whether a readable connection waits for a slot: in the
// pool's queue or in its client's. Every such connection is on the
// no-worker timer list, whichever queue it is in.
func (d *dispatcher) pressured() bool { return d.lists[listWaitTimers].n > 0 }

// signalPressure tells every worker when the pressure changed. It runs once
// per loop iteration, after the events were handled.
func (d *dispatcher) signalPressure() {
	on := d.pressured()
	if on == d.pressure {
		return
	}
	d.pressure = on
	if on {
		d.c.pressureOn++
	}
	for _, w := range d.workers {
		if w.ch != nil {
			d.sendPressure(w, on)
		}
	}
}

func (d *dispatcher) sendPressure(w *workerProc, on bool) {
	d.send(w, &proto.Frame{Body: &proto.Frame_Pressure{Pressure: &proto.Pressure{On: on}}}, -1)
}

// countHot records what a Done says about hot waits, and why a kept-alive
// connection came back.
func (d *dispatcher) countHot(m *proto.Done) {
	d.c.hotRequests += uint64(m.GetHotRequests())
	if m.GetDisposition() == proto.Disposition_KEEP_ALIVE {
		d.c.handbacks[m.GetHandback()]++
	}
}

// handbackCounters adds the handback counters to a snapshot's counters.
func (c *counters) handbackCounters(out map[string]uint64) {
	out["hot_requests"] = c.hotRequests
	out["pressure_on"] = c.pressureOn
	for i, n := range c.handbacks {
		out["handback_"+strings.ToLower(proto.Handback(i).String())] = n
	}
}
