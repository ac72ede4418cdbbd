package supervisor

import (
	"syscall"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/view"
	"github.com/hashicorp/go-hclog"
)

// Refusal reasons at admission.
const (
	refusedPerClient = "per_client"
	refusedPenalty   = "penalty"
	refusedQueued    = "queued"
)

// Refusal reasons of the PROXY protocol.
const (
	refusedProxyUntrusted = "proxy_untrusted"
	refusedProxyMalformed = "proxy_malformed"
)

// refusedReasons are the reasons a connection is refused at accept, or closed
// on reading its PROXY header, each exported as refused_<reason>.
var refusedReasons = []string{refusedPerClient, refusedPenalty, refusedQueued, refusedProxyUntrusted, refusedProxyMalformed}

// counters are the dispatcher's monotonic counts. Owned by the loop.
type counters struct {
	accepted          uint64
	refused           map[string]uint64
	closed            uint64
	peerClosed        uint64
	dispatches        uint64
	requests          uint64
	shareWaits        uint64
	poolWaits         uint64
	timeoutFirstByte  uint64
	timeoutIdle       uint64
	timeoutNoWorker   uint64
	idleEvicted       uint64
	acceptErrors      uint64
	acceptDispatches  uint64 // dispatched in the wake-up that accepted them
	closingDispatches uint64 // dispatched with the descriptor given up (closingHead)
	sendBatches       uint64 // sendmmsg calls that sent frames to a worker
	sendRetries       uint64 // sends to a worker the kernel refused for now (holdSends)
	acceptPauses      uint64
	workerDeaths      uint64
	deaths            map[deathCause]uint64
	workerKills       uint64
	ipcOverloaded     uint64
	upstreamRefused   uint64
	upstreamErrors    uint64
	rateLimited       uint64
	tlsPlainHTTP      uint64
	tlsNotTLS         uint64
	tlsSigns          uint64
	tlsHandshakes     uint64
	tlsSignErrors     uint64
	tlsAffinity       uint64
	affinity          uint64    // plain connections dispatched without a descriptor
	affinityMoves     uint64    // kept connections moved to another worker
	outcomes          [6]uint64 // by proto.Outcome
	handbacks         [6]uint64 // by proto.Handback
	hotRequests       uint64
	pressureOn        uint64    // times the pressure went on
	byClass           [6]uint64 // responses by status class; [0] counts statuses out of range
	latency           histogram
	// Rate decisions with a cluster store: the store's, those the local
	// bucket made when the store did not answer within store_timeout or
	// answered with an error, and those it made because the store was
	// down or its queue full.
	rateStored        uint64
	rateStoreTimeouts uint64
	rateStoreErrors   uint64
	rateStoreLocal    uint64
}

// deathCause is one series of gatehouse_worker_deaths_total.
type deathCause struct {
	reason string
	signal syscall.Signal // 0 when it exited
}

// histogram counts observations per bucket of view.LatencyBuckets (not
// cumulative), with one more bucket for +Inf.
type histogram struct {
	counts [16]uint64
	sum    float64 // seconds
	n      uint64
}

// observe records one response reported by a worker.
func (c *counters) observe(status uint32, micros uint64) {
	class := int(status / 100)
	if class < 1 || class > 5 {
		class = 0
	}
	c.byClass[class]++
	secs := float64(micros) / 1e6
	i := 0
	for i < len(view.LatencyBuckets) && secs > view.LatencyBuckets[i] {
		i++
	}
	c.latency.counts[i]++
	c.latency.sum += secs
	c.latency.n++
}

// Routine client behaviour — a refused connection, a client closing an idle
// kept-alive connection, a reset, a timeout — is no reason for an operator to
// look: it is logged at DEBUG, counted, and summarised once a minute at INFO
// (summarize, views.go), naming only what happened (docs/DESIGN.md §6.4). A connection that got
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
