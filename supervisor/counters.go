package supervisor

import (
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/limits"
	"github.com/gatehouse-dev/gatehouse/supervisor/secrets"
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
	accepted         uint64
	refused          map[string]uint64
	closed           uint64
	peerClosed       uint64
	dispatches       uint64
	requests         uint64
	shareWaits       uint64
	poolWaits        uint64
	timeoutFirstByte uint64
	timeoutIdle      uint64
	timeoutNoWorker  uint64
	idleEvicted      uint64
	acceptErrors     uint64
	acceptPauses     uint64
	workerDeaths     uint64
	deaths           map[deathCause]uint64
	workerKills      uint64
	ipcOverloaded    uint64
	upstreamRefused  uint64
	upstreamErrors   uint64
	rateLimited      uint64
	tlsPlainHTTP     uint64
	tlsNotTLS        uint64
	tlsSigns         uint64
	tlsHandshakes    uint64
	tlsSignErrors    uint64
	tlsAffinity      uint64
	affinity         uint64    // plain connections dispatched without a descriptor
	affinityMoves    uint64    // kept connections moved to another worker
	outcomes         [6]uint64 // by proto.Outcome
	handbacks        [6]uint64 // by proto.Handback
	hotRequests      uint64
	pressureOn       uint64    // times the pressure went on
	byClass          [6]uint64 // responses by status class; [0] counts statuses out of range
	latency          histogram
	// Rate decisions with a cluster store: the store's, those the local
	// bucket made when the store did not answer within store_timeout or
	// answered with an error, and those it made because the store was
	// down or its queue full.
	rateStored        uint64
	rateStoreTimeouts uint64
	rateStoreErrors   uint64
	rateStoreLocal    uint64
}

// LatencyBuckets are the upper bounds, in seconds, of the request latency
// histogram.
var LatencyBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// histogram counts observations per bucket of LatencyBuckets (not
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
	for i < len(LatencyBuckets) && secs > LatencyBuckets[i] {
		i++
	}
	c.latency.counts[i]++
	c.latency.sum += secs
	c.latency.n++
}

// Snapshot is a copy of the dispatcher's state at one moment.
type Snapshot struct {
	Time time.Time
	// ShutdownGrace is what a drain or SIGTERM gives requests in flight.
	ShutdownGrace time.Duration
	Pool          int
	Share         int
	AtWorkers     int
	Queued        int // connections that have not finished a first request
	// InFirstRequest is how many of Queued are out at a worker in their
	// first request (a long upload, an SSE stream): past their head, not
	// before a request.
	InFirstRequest int
	Conns          map[string]int
	Waiting        int // connections waiting for the pool
	Clients        []ClientInfo
	Workers        []WorkerInfo
	Counters       map[string]uint64
	Stopping       bool
	// Admission: bytes held in incomplete heads, whether stress mode is on,
	// and the first-byte and head timeouts in force.
	HeadBytes        int
	Stress           bool
	FirstByteTimeout time.Duration
	HeadTimeout      time.Duration
	// BodyBytes and BodyConns are the body budget in use: request bodies
	// being received outside the pool.
	BodyBytes int64
	BodyConns int
	// Streams and Upgrades are the stream budget in use: stream-class
	// requests and upgraded connections outside the pool, of StreamsMax.
	Streams    int
	Upgrades   int
	StreamsMax int
	Listeners  []netip.AddrPort
	// Responses counts responses by status class: "1xx" … "5xx", and
	// "other" for a status out of range.
	Responses map[string]uint64
	// Latency is the request latency histogram: Counts[i] responses took at
	// most LatencyBuckets[i] seconds and more than the bucket before;
	// Counts[len(LatencyBuckets)] took longer than the last bound.
	Latency LatencyHistogram
	// RateLimitBuckets is how many rate limit buckets the table holds.
	RateLimitBuckets int
	// Deaths counts worker deaths by reason and signal; they sum to
	// Counters["worker_deaths"].
	Deaths []DeathCount
	// Penalties are the client keys refused now, or present at worker
	// deaths within the last minute.
	Penalties []limits.PenaltyInfo
	// Upstreams are the configured upstreams, by name.
	Upstreams []UpstreamInfo
	// Certificates are the TLS listeners' certificates, as loaded.
	Certificates []secrets.CertificateInfo
	// CertificateErrors are the certificates the last reload could not
	// load.
	CertificateErrors []secrets.CertificateError
	// Cluster is the shared store's link, nil without a cluster block.
	Cluster *ClusterInfo
}

// ClusterInfo is the link to the shared store.
type ClusterInfo struct {
	Instance, Address string
	Up                bool
	Since             time.Time
	Error             string
	SharedTickets     bool
}

// UpstreamInfo is one upstream's budget and addresses.
type UpstreamInfo struct {
	Name           string
	MaxConnections int
	Share          int // connections one worker may hold
	Held           int // given to workers (in use or idle in their pools)
	Dialing        int
	Waiting        int    // dials waiting for reclaimed connections
	Reclaims       uint64 // Reclaim notices sent to workers
	ShareRefused   uint64 // dials refused over a worker's share
	Addresses      []AddressInfo
}

// AddressInfo is one upstream address's state: "up", "down" (out of rotation
// for fail_timeout after failed dials), "failing" (the upstream's only
// address, still dialed, after max_fails failed dials in a row), "probing"
// (one dial tests it after fail_timeout) or "check-failed" (its health
// check fails).
type AddressInfo struct {
	Address string // an IP and port, or "unix:/path"
	// Host is the configured "name:port" Address was resolved from, or "".
	Host      string
	State     string
	Fails     int // consecutive dial failures
	Dials     uint64
	Failures  uint64
	DownFor   time.Duration // left of fail_timeout when down
	LastError string
}

// LatencyHistogram is a snapshot of the request latency histogram.
type LatencyHistogram struct {
	Counts []uint64
	Sum    float64 // seconds
	Count  uint64
}

// ClientInfo is one client key's state.
type ClientInfo struct {
	Key     string
	Trusted bool
	Conns   int
	Out     int
	Waiting int
	Waits   uint64
	// Penalty is how long the key is still refused for having had
	// connections at dying workers (0: not refused).
	Penalty time.Duration
	// Deaths counts the worker deaths of the last minute it had a
	// connection at, toward a penalty.
	Deaths int
	// BodyConns and BodyBytes are its share of the body budget: bodies
	// being received outside the pool.
	BodyConns int
	BodyBytes int64
}

// WorkerInfo is one worker slot's state.
type WorkerInfo struct {
	Slot   int
	PID    int
	State  string
	Active int
	// Kept is how many parked plain connections' descriptors it keeps
	// (affinity), and TLS how many TLS connections' state it holds, out
	// at it or parked.
	Kept     int
	TLS      int
	Served   uint64
	Restarts int
	Backoff  time.Duration
	Sandbox  []string
	// Threads is the GOMAXPROCS its process reported when ready.
	Threads int
	// Exiting is true while the slot's process is gone from the loop's view
	// (killed, or its channel closed) but not reaped yet: its death is not
	// counted yet.
	Exiting bool
}

func (d *dispatcher) snapshot(now time.Time) Snapshot {
	s := Snapshot{
		Time:          now,
		Pool:          d.pool,
		Share:         d.share,
		AtWorkers:     d.out,
		Queued:        d.queued,
		Conns:         map[string]int{},
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
	s.Responses = map[string]uint64{"other": d.c.byClass[0]}
	for i := 1; i <= 5; i++ {
		s.Responses[strconv.Itoa(i)+"xx"] = d.c.byClass[i]
	}
	s.Latency = LatencyHistogram{Counts: slices.Clone(d.c.latency.counts[:len(LatencyBuckets)+1]), Sum: d.c.latency.sum, Count: d.c.latency.n}
	for dc, n := range d.c.deaths {
		s.Deaths = append(s.Deaths, DeathCount{Reason: dc.reason, Signal: signalName(dc.signal), N: n})
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
		s.Clients = append(s.Clients, ClientInfo{Key: cl.key.String(), Trusted: cl.trusted, Conns: cl.conns, Out: cl.out, Waiting: cl.waiting.n, Waits: cl.waits,
			BodyConns: cl.bodyConns, BodyBytes: cl.bodyBytes})
	}
	// Keys in the penalty box, with their connections if they hold any.
	s.Penalties = d.penalties.List(now)
	for _, p := range s.Penalties {
		i := slices.IndexFunc(s.Clients, func(c ClientInfo) bool { return c.Key == p.Key })
		if i < 0 {
			s.Clients = append(s.Clients, ClientInfo{Key: p.Key})
			i = len(s.Clients) - 1
		}
		s.Clients[i].Penalty, s.Clients[i].Deaths = p.Remaining, p.Deaths
	}
	s.Counters["client_penalties"] = d.penalties.Penalties()
	d.clusterSnapshot(&s)
	for _, w := range d.workers {
		wi := WorkerInfo{Slot: w.slot, PID: w.pid, State: w.state.String(), Active: w.active, Kept: w.kept, TLS: w.tls, Served: w.served, Restarts: w.restarts, Backoff: w.backoff, Threads: w.threads, Exiting: w.state == workerDead && !w.exited}
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

// Client returns the entry for key, or a zero ClientInfo.
func (s Snapshot) Client(key string) ClientInfo {
	for _, c := range s.Clients {
		if c.Key == key {
			return c
		}
	}
	return ClientInfo{Key: key}
}
