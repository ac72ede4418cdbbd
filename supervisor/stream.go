package supervisor

import (
	"fmt"
	"time"

	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/hashicorp/go-hclog"
)

// Long-lived requests (docs/DESIGN.md §10). A worker that sees a request on a
// stream-class route, or is about to upgrade a connection, sends StreamStart:
// the connection leaves the request pool (its slot and its client's share are
// released, so ordinary requests run meanwhile) and charges the stream budget
// instead, globally and per client key. It stays charged until the worker
// returns it in Done (or it is closed, or the worker dies); over the budget
// the worker is refused and answers 503 at once. The connection stays at its
// worker throughout; only its accounting moves.
//
//	at_worker ──StreamStart ok──► stream (outside the pool) ──Done / close / death──► released

// streamBudget is the dispatcher's state for stream-class requests and
// upgraded connections. Owned by the loop.
type streamBudget struct {
	streamsOpen  int // stream-class requests outside the pool
	upgradesOpen int // upgraded connections outside the pool

	streamsStarted  uint64
	upgradesStarted uint64
	streamsRefused  uint64
	upgradesRefused uint64
}

// streamState is a connection's place in the stream budget. Zero: in the pool.
type streamState struct {
	outside bool // StreamStart granted: no pool slot held, the budget charged
	upgrade bool
}

// validStreamStart checks a StreamStart before it takes a slot.
func (d *dispatcher) validStreamStart(w *workerProc, m *proto.StreamStart) string {
	c := d.conns.get(m.GetConnId())
	switch {
	case c == nil || c.worker != w || c.state != stateAtWorker:
		return fmt.Sprintf("StreamStart for connection %d it does not hold", m.GetConnId())
	case c.stream.outside:
		return "StreamStart twice"
	case c.bodyOutside:
		return "StreamStart while its body is outside the pool"
	}
	return ""
}

// streamStart takes c out of the pool and charges the stream budget, or
// refuses when the budget (global or the client's) has no room.
func (d *dispatcher) streamStart(w *workerProc, id uint64, m *proto.StreamStart, now time.Time) {
	w.slots.Release()
	c := d.conns.get(m.GetConnId())
	cl, s := c.client, d.cfg.Streams
	if d.streamsOpen+d.upgradesOpen >= s.Max || !cl.trusted && cl.streams >= s.PerClient {
		if m.GetUpgrade() {
			d.upgradesRefused++
		} else {
			d.streamsRefused++
		}
		d.logLimited(hclog.Warn, "stream-budget", "long-lived request refused: the stream budget is full")
		d.send(w, &proto.Frame{Id: id, Body: &proto.Frame_StreamReply{StreamReply: &proto.StreamReply{}}}, -1)
		return
	}
	c.stream = streamState{outside: true, upgrade: m.GetUpgrade()}
	cl.streams++
	if m.GetUpgrade() {
		d.upgradesOpen++
		d.upgradesStarted++
	} else {
		d.streamsOpen++
		d.streamsStarted++
	}
	// The slot goes back to the pool now, as for a finished round.
	w.active--
	cl.out--
	d.out--
	d.send(w, &proto.Frame{Id: id, Body: &proto.Frame_StreamReply{StreamReply: &proto.StreamReply{Ok: true}}}, -1)
	d.pump(cl, now)
}

// releaseStream settles a connection that leaves its worker (Done, close,
// worker death) while charged to the stream budget. It reports whether c was
// outside the pool (and so held no slot).
func (d *dispatcher) releaseStream(c *conn) bool {
	if !c.stream.outside {
		return false
	}
	if c.stream.upgrade {
		d.upgradesOpen--
	} else {
		d.streamsOpen--
	}
	c.client.streams--
	c.stream = streamState{}
	c.worker = nil
	return true
}

// streamSnapshot adds the stream budget's state to s.
func (d *dispatcher) streamSnapshot(s *Snapshot) {
	s.Streams, s.Upgrades, s.StreamsMax = d.streamsOpen, d.upgradesOpen, d.cfg.Streams.Max
	s.Counters["streams_started"] = d.streamsStarted
	s.Counters["upgrades_started"] = d.upgradesStarted
	s.Counters["streams_refused"] = d.streamsRefused
	s.Counters["upgrades_refused"] = d.upgradesRefused
}
