package upstream

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
)

// Configure matches the upstream table to the configuration, keeping the
// counts of upstreams that stay and the health of addresses that stay, and
// (re)starting the active health checks. workers is the worker count that
// max_connections is shared among.
func (b *Broker) Configure(ups []config.Upstream, workers int) {
	b.workerCount = workers
	keep := make(map[string]*upstreamState, len(ups))
	for _, u := range ups {
		st := b.upstreams[u.Name]
		if st == nil {
			st = &upstreamState{}
		}
		old := make(map[netip.AddrPort]*addrState, len(st.addrs))
		for _, a := range st.addrs {
			old[a.addr] = a
		}
		st.addrs = st.addrs[:0:0]
		for _, ap := range u.Addresses {
			a := old[ap]
			if a == nil {
				a = &addrState{addr: ap}
			}
			st.addrs = append(st.addrs, a)
		}
		st.cfg = u
		keep[u.Name] = st
	}
	b.stopHealthChecks()
	b.upstreams = keep
	if b.stopping {
		return
	}
	for _, st := range b.upstreams {
		if hc := st.cfg.HealthCheck; hc != nil {
			ctx, cancel := context.WithCancel(context.Background())
			st.stopCheck = cancel
			addrs := slices.Clone(st.cfg.Addresses)
			go healthCheck(ctx, st.cfg.Name, addrs, *hc, b.post)
		}
	}
}

// Stop ends every active health check and every retry of a failed dial on
// another address, at shutdown.
func (b *Broker) Stop() {
	b.stopping = true
	b.stopHealthChecks()
}

// stopHealthChecks ends every active health check.
func (b *Broker) stopHealthChecks() {
	for _, st := range b.upstreams {
		if st.stopCheck != nil {
			st.stopCheck()
			st.stopCheck = nil
		}
	}
}

// Info is one upstream's budget and addresses.
type Info struct {
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
// for fail_timeout after failed dials), "probing" (one dial tests it after
// fail_timeout) or "check-failed" (its health check fails).
type AddressInfo struct {
	Address   string
	State     string
	Fails     int // consecutive dial failures
	Dials     uint64
	Failures  uint64
	DownFor   time.Duration // left of fail_timeout when down
	LastError string
}

// Info reports every upstream's budget and addresses, by name.
func (b *Broker) Info(now time.Time) []Info {
	out := make([]Info, 0, len(b.upstreams))
	for _, u := range b.upstreams {
		ui := Info{
			Name: u.cfg.Name, MaxConnections: u.cfg.MaxConnections, Share: b.share(u),
			Held: u.held, Dialing: u.dialing, Waiting: len(u.waiting), Reclaims: u.reclaims, ShareRefused: u.shareRefuse,
		}
		for _, a := range u.addrs {
			ai := AddressInfo{Address: a.addr.String(), State: "up", Fails: a.fails, Dials: a.dials, Failures: a.failures, LastError: a.lastError}
			switch {
			case a.checkFailed:
				ai.State = "check-failed"
			case a.probing:
				ai.State = "probing"
			case !a.downUntil.IsZero() && now.Before(a.downUntil):
				ai.State, ai.DownFor = "down", a.downUntil.Sub(now)
			case !a.downUntil.IsZero():
				ai.State = "probing" // the next dial probes it
			}
			ui.Addresses = append(ui.Addresses, ai)
		}
		out = append(out, ui)
	}
	slices.SortFunc(out, func(a, b Info) int { return strings.Compare(a.Name, b.Name) })
	return out
}
