package supervisor

import (
	"time"

	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/hashicorp/go-hclog"
)

// Routine client behaviour — a refused connection, a client closing an idle
// kept-alive connection, a reset, a timeout — is no reason for an operator to
// look: it is logged at DEBUG, counted, and summarised here once a minute at
// INFO, naming only what happened (docs/DESIGN.md §6.4). A connection that got
// the canned 503 for lack of a worker raises the summary to WARN: the pool
// is too small for the load.

// summaryEvery is how often the summary is logged, when anything happened.
const summaryEvery = time.Minute

// routineEvents are the events the summary counts, in the order it names them.
var routineEvents = [...]string{
	"refused_per_client", "refused_queued", "incomplete_evicted", "peer_closed", "peer_reset",
	"idle_evicted", "timeout_first_byte", "timeout_head", "timeout_head_gap", "timeout_idle",
	"rate_limited", "timeout_no_worker",
}

type eventCounts [len(routineEvents)]uint64

// clientSummary is the state of the summary. Owned by the loop.
type clientSummary struct {
	since time.Time   // start of the current period
	last  eventCounts // the counts at its start
}

func (d *dispatcher) routineCounts() eventCounts {
	return eventCounts{
		d.c.refused[refusedPerClient], d.c.refused[refusedQueued], d.incompleteEvicted, d.c.peerClosed,
		d.c.outcomes[proto.Outcome_PEER_RESET], d.c.idleEvicted,
		d.c.timeoutFirstByte, d.timeoutHead, d.timeoutGap, d.c.timeoutIdle,
		d.c.rateLimited, d.c.timeoutNoWorker,
	}
}

// summarize logs the period's events once it is summaryEvery long, or at
// once when final (shutdown), and starts the next period.
func (d *dispatcher) summarize(now time.Time, final bool) {
	if !final && now.Sub(d.summary.since) < summaryEvery {
		return
	}
	cur := d.routineCounts()
	if level, args, ok := summaryLine(d.summary.last, cur, now.Sub(d.summary.since)); ok {
		d.log.Log(level, "client events", args...)
	}
	d.summary = clientSummary{since: now, last: cur}
}

// summaryLine returns the summary of the events between two counts over
// period, or false when nothing happened.
func summaryLine(prev, cur eventCounts, period time.Duration) (hclog.Level, []any, bool) {
	level := hclog.Info
	args := []any{"period", period.Round(100 * time.Millisecond).String()}
	for i, name := range routineEvents {
		n := cur[i] - prev[i]
		if n == 0 {
			continue
		}
		args = append(args, name, n)
		if name == "timeout_no_worker" {
			level = hclog.Warn
		}
	}
	return level, args, len(args) > 2
}
