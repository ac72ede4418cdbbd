package supervisor

import (
	"time"

	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/view"
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
// roundState (conn.go) draws the states; round.go moves the counts.

// streamStart takes c out of the pool and charges the stream budget, or
// refuses when the budget (global or the client's) has no room.
func (d *dispatcher) streamStart(w *workerProc, id uint64, c *conn, upgrade bool, now time.Time) {
	w.slots.Release()
	cl, s := c.client, d.cfg.Streams
	if d.streamsOpen+d.upgradesOpen >= s.Max || !cl.trusted && cl.streams >= s.PerClient {
		if upgrade {
			d.upgradesRefused++
		} else {
			d.streamsRefused++
		}
		d.logLimited(hclog.Warn, "stream-budget", "long-lived request refused: the stream budget is full")
		d.send(w, &proto.Frame{Id: id, Body: &proto.Frame_StreamReply{StreamReply: &proto.StreamReply{}}}, -1)
		return
	}
	if upgrade {
		d.upgradesStarted++
	} else {
		d.streamsStarted++
	}
	// The slot goes back to the pool now, as for a finished round.
	var word uint64
	if upgrade {
		word = 1
	}
	d.setRound(c, roundStream, word)
	d.send(w, &proto.Frame{Id: id, Body: &proto.Frame_StreamReply{StreamReply: &proto.StreamReply{Ok: true}}}, -1)
	d.pump(cl, now)
}

// streamSnapshot adds the stream budget's state to s.
func (d *dispatcher) streamSnapshot(s *view.Snapshot) {
	s.Streams, s.Upgrades, s.StreamsMax = d.streamsOpen, d.upgradesOpen, d.cfg.Streams.Max
	s.Counters["streams_started"] = d.streamsStarted
	s.Counters["upgrades_started"] = d.upgradesStarted
	s.Counters["streams_refused"] = d.streamsRefused
	s.Counters["upgrades_refused"] = d.upgradesRefused
}
