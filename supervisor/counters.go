package supervisor

import (
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/view"
	"github.com/hashicorp/go-hclog"
)

// Refusal reasons at admission.
const (
	refusedPerClient = "per_client"
	refusedPenalty   = "penalty"
	refusedQueued    = "queued"
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

func (d *dispatcher) snapshot(now time.Time) view.Snapshot {
	s := view.Snapshot{
		Time:          now,
		Pool:          d.pool,
		Share:         d.share,
		AtWorkers:     d.out,
		Queued:        d.queued,
		Conns:         map[string]int{},
		ConnStates:    stateNames[:],
		Waiting:       d.lists[listWaiting].n,
		Stopping:      d.stopping,
		ShutdownGrace: d.cfg.Limits.ShutdownGrace,
		Counters: map[string]uint64{
			"accepted":           d.c.accepted,
			"closed":             d.c.closed,
			"peer_closed":        d.c.peerClosed,
			"dispatches":         d.c.dispatches,
			"requests":           d.c.requests,
			"share_waits":        d.c.shareWaits,
			"pool_waits":         d.c.poolWaits,
			"timeout_first_byte": d.c.timeoutFirstByte,
			"timeout_idle":       d.c.timeoutIdle,
			"timeout_no_worker":  d.c.timeoutNoWorker,
			"idle_evicted":       d.c.idleEvicted,
			"accept_errors":      d.c.acceptErrors,
			"accept_dispatches":  d.c.acceptDispatches,
			"closing_dispatches": d.c.closingDispatches,
			"send_batches":       d.c.sendBatches,
			"accept_pauses":      d.c.acceptPauses,
			"worker_deaths":      d.c.workerDeaths,
			"worker_kills":       d.c.workerKills,
			"refused_per_client": d.c.refused[refusedPerClient],
			"refused_queued":     d.c.refused[refusedQueued],
			"ipc_overloaded":     d.c.ipcOverloaded,
			"upstream_refused":   d.c.upstreamRefused,
			"upstream_errors":    d.c.upstreamErrors,
			"rate_limited":       d.c.rateLimited,
			"tls_plain_http":     d.c.tlsPlainHTTP,
			"tls_not_tls":        d.c.tlsNotTLS,
			"tls_signs":          d.c.tlsSigns,
			"tls_handshakes":     d.c.tlsHandshakes,
			"tls_sign_errors":    d.c.tlsSignErrors,
			"tls_affinity":       d.c.tlsAffinity,
			"affinity":           d.c.affinity,
			"affinity_moves":     d.c.affinityMoves,
			// Counted by the relay goroutines, not the loop.
			"worker_log_lines_dropped": d.s.logDropped.Load(),
			"log_lines_dropped":        d.s.logOutputDropped(),
			"access_lines_rejected":    d.s.access.Rejected(),
			// A gauge, not a counter: the rate limiter's buckets now.
		},
	}
	s.RateLimitBuckets = d.limiter.Len()
	s.Certificates = d.keys.Certificates()
	s.CertificateErrors = d.keys.Failures()
	d.headSnapshot(&s)
	d.bodySnapshot(&s)
	d.streamSnapshot(&s)
	d.upgradeSnapshot(&s)
	s.Responses = map[string]uint64{"other": d.c.byClass[0]}
	for i := 1; i <= 5; i++ {
		s.Responses[strconv.Itoa(i)+"xx"] = d.c.byClass[i]
	}
	s.Latency = view.LatencyHistogram{Counts: slices.Clone(d.c.latency.counts[:len(view.LatencyBuckets)+1]), Sum: d.c.latency.sum, Count: d.c.latency.n}
	for dc, n := range d.c.deaths {
		s.Deaths = append(s.Deaths, view.DeathCount{Reason: dc.reason, Signal: signalName(dc.signal), N: n})
	}
	sort.Slice(s.Deaths, func(i, j int) bool {
		a, b := s.Deaths[i], s.Deaths[j]
		return a.Reason < b.Reason || a.Reason == b.Reason && a.Signal < b.Signal
	})
	for i, n := range d.c.outcomes {
		s.Counters["round_"+strings.ToLower(proto.Outcome(i).String())] = n
	}
	d.c.handbackCounters(s.Counters)
	for _, l := range d.listeners {
		s.Listeners = append(s.Listeners, l.addr)
	}
	for c := range d.conns.all() {
		s.Conns[c.state.String()]++
		if c.state == stateAtWorker && c.requests == 0 {
			s.InFirstRequest++
		}
	}
	s.Upstreams = d.upstreamInfo(now)
	for _, cl := range d.clients {
		s.Clients = append(s.Clients, view.ClientInfo{Key: cl.key.String(), Trusted: cl.trusted, Conns: cl.conns, Out: cl.out, Waiting: cl.waiting.n, Waits: cl.waits,
			BodyConns: cl.bodyConns, BodyBytes: cl.bodyBytes})
	}
	// Keys in the penalty box, with their connections if they hold any.
	s.Penalties = d.penalties.List(now)
	for _, p := range s.Penalties {
		i := slices.IndexFunc(s.Clients, func(c view.ClientInfo) bool { return c.Key == p.Key })
		if i < 0 {
			s.Clients = append(s.Clients, view.ClientInfo{Key: p.Key})
			i = len(s.Clients) - 1
		}
		s.Clients[i].Penalty, s.Clients[i].Deaths = p.Remaining, p.Deaths
	}
	s.Counters["client_penalties"] = d.penalties.Penalties()
	d.clusterSnapshot(&s)
	for _, w := range d.workers {
		wi := view.WorkerInfo{Slot: w.slot, PID: w.pid, State: w.state.String(), Active: w.active, Kept: w.kept, TLS: w.tls, Served: w.served, Restarts: w.restarts, Backoff: w.backoff, Threads: w.threads, Exiting: w.state == workerDead && !w.exited}
		for _, l := range w.layers {
			mark := "+"
			if !l.GetApplied() {
				mark = "-"
			}
			wi.Sandbox = append(wi.Sandbox, mark+l.GetName())
		}
		s.Workers = append(s.Workers, wi)
	}
	return s
}

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
