// Package view is the supervisor loop's state as seen from outside: the
// Snapshot the loop copies itself into, rendered in the Prometheus text
// format for scrapes and workers' StatsRequests, and in the admin socket's
// types. It holds no state and never calls the loop: the loop calls down
// to it with a Snapshot.
package view

import (
	"net/netip"
	"sort"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/limits"
	"github.com/gatehouse-dev/gatehouse/supervisor/secrets"
	"github.com/gatehouse-dev/gatehouse/supervisor/upstream"
)

// LatencyBuckets are the upper bounds, in seconds, of the request latency
// histogram.
var LatencyBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

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
	// ConnStates are the loop's connection states, in its order: each is
	// shown, with 0 where Conns has no entry for it.
	ConnStates []string
	Waiting    int // connections waiting for the pool
	Clients    []ClientInfo
	Workers    []WorkerInfo
	Counters   map[string]uint64
	Stopping   bool
	// Upgrade is the binary upgrade's state, on either side of it.
	Upgrade UpgradeInfo
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

// UpstreamInfo is one upstream's budget and addresses, as the broker
// reports them.
type UpstreamInfo = upstream.Info

// AddressInfo is one upstream address's state.
type AddressInfo = upstream.AddressInfo

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

// DeathCount is the number of worker deaths of one reason and signal.
type DeathCount struct {
	Reason string
	// Signal is the signal's name ("SIGSYS"), or "none" for an exit.
	Signal string
	N      uint64
}

// DeathsByReason sums s.Deaths by reason.
func (s Snapshot) DeathsByReason() map[string]uint64 {
	m := map[string]uint64{}
	for _, d := range s.Deaths {
		m[d.Reason] += d.N
	}
	return m
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

// SortClients orders the clients by pool slots held, then connections. It
// runs off the loop, on the Snapshot's copy.
func (s *Snapshot) SortClients() {
	sort.Slice(s.Clients, func(i, j int) bool {
		a, b := s.Clients[i], s.Clients[j]
		if a.Out != b.Out {
			return a.Out > b.Out
		}
		return a.Conns > b.Conns
	})
}

// UpgradeInfo is a binary upgrade as one of its two supervisors sees it
// (docs/DESIGN.md §11).
type UpgradeInfo struct {
	// HandingOver: this is the old supervisor, handing over to PeerPID.
	HandingOver bool
	PeerPID     int
	PeerVersion string
	// Staying counts the connections the old supervisor still holds.
	Staying int
	// Sent and Received count the connections handed over; Drained those
	// the old supervisor closed instead (TLS, streams, upgrade_grace).
	Sent, Received, Drained uint64
	// Failed counts upgrades that failed; LastError is the latest reason.
	Failed    uint64
	LastError string
	// Starting is the binary an upgrade is starting; OldDraining: this is
	// the new supervisor, and the old one PeerPID still holds Staying
	// connections.
	Starting    string
	OldDraining bool
}
