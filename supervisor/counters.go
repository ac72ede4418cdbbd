package supervisor

import (
	"strings"

	"github.com/gatehouse-dev/gatehouse/proto"
	"net/netip"
	"sort"
	"syscall"
	"time"
)

// Refusal reasons at admission.
const (
	refusedPerClient = "per_client"
	refusedQueued    = "queued"
)

// counters are the dispatcher's monotonic counts. Owned by the loop.
type counters struct {
	accepted             uint64
	refused              map[string]uint64
	closed               uint64
	peerClosed           uint64
	dispatches           uint64
	requests             uint64
	shareWaits           uint64
	poolWaits            uint64
	timeoutFirstByte     uint64
	timeoutIdle          uint64
	timeoutNoWorker      uint64
	idleEvicted          uint64
	acceptErrors         uint64
	acceptPauses         uint64
	workerDeaths         uint64
	workerDeathsBySignal map[syscall.Signal]uint64
	workerKills          uint64
	outcomes             [5]uint64 // by proto.Outcome
}

// Snapshot is a copy of the dispatcher's state at one moment.
type Snapshot struct {
	Time      time.Time
	Pool      int
	Share     int
	AtWorkers int
	Queued    int // connections that have not finished a first request
	Conns     map[string]int
	Waiting   int // connections waiting for the pool
	Clients   []ClientInfo
	Workers   []WorkerInfo
	Counters  map[string]uint64
	Stopping  bool
	Listeners []netip.AddrPort
}

// ClientInfo is one client key's state.
type ClientInfo struct {
	Key     string
	Trusted bool
	Conns   int
	Out     int
	Waiting int
	Waits   uint64
}

// WorkerInfo is one worker slot's state.
type WorkerInfo struct {
	Slot     int
	PID      int
	State    string
	Active   int
	Served   uint64
	Restarts int
	Backoff  time.Duration
	Sandbox  []string
}

func (d *dispatcher) snapshot(now time.Time) Snapshot {
	s := Snapshot{
		Time:      now,
		Pool:      d.pool,
		Share:     d.share,
		AtWorkers: d.out,
		Queued:    d.queued,
		Conns:     map[string]int{},
		Waiting:   d.waiting.n,
		Stopping:  d.stopping,
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
		},
	}
	for i, n := range d.c.outcomes {
		s.Counters["round_"+strings.ToLower(proto.Outcome(i).String())] = n
	}
	for _, l := range d.listeners {
		s.Listeners = append(s.Listeners, l.addr)
	}
	for _, c := range d.conns {
		s.Conns[c.state.String()]++
	}
	for _, cl := range d.clients {
		s.Clients = append(s.Clients, ClientInfo{Key: cl.key.String(), Trusted: cl.trusted, Conns: cl.conns, Out: cl.out, Waiting: cl.waiting.n, Waits: cl.waits})
	}
	sort.Slice(s.Clients, func(i, j int) bool {
		a, b := s.Clients[i], s.Clients[j]
		if a.Out != b.Out {
			return a.Out > b.Out
		}
		return a.Conns > b.Conns
	})
	for _, w := range d.workers {
		wi := WorkerInfo{Slot: w.slot, PID: w.pid, State: w.state.String(), Active: w.active, Served: w.served, Restarts: w.restarts, Backoff: w.backoff}
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
