package upstream

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
)

// Configure matches the upstream table to the configuration, keeping the
// counts of upstreams that stay and the health of addresses that stay, and
// (re)starting the active health checks and the re-resolutions. resolved
// and resolveErr are what Resolve returned for them: a name missing from
// resolved keeps the addresses it had. workers is the worker count that
// max_connections is shared among.
func (b *Broker) Configure(ups []config.Upstream, resolved Resolved, resolveErr error, workers int) {
	b.workerCount = workers
	keep := make(map[string]*upstreamState, len(ups))
	for _, u := range ups {
		st := b.upstreams[u.Name]
		if st == nil {
			st = &upstreamState{}
		}
		st.cfg = u
		if u.HasHostNames() {
			b.applyResolved(st, resolved, resolveErr)
		}
		b.setEndpoints(st)
		keep[u.Name] = st
	}
	b.stopGoroutines()
	b.upstreams = keep
	if b.stopping {
		return
	}
	for _, st := range b.upstreams {
		b.restartHealthCheck(st)
		if st.cfg.HasHostNames() && st.cfg.ResolveInterval > 0 {
			ctx, cancel := context.WithCancel(context.Background())
			st.stopResolve = cancel
			go reresolve(ctx, st.cfg, b.post)
		}
	}
}

// restartHealthCheck (re)starts u's active health check, if it has one,
// on its current endpoints.
func (b *Broker) restartHealthCheck(u *upstreamState) {
	if u.stopCheck != nil {
		u.stopCheck()
		u.stopCheck = nil
	}
	hc := u.cfg.HealthCheck
	if hc == nil || b.stopping {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	u.stopCheck = cancel
	eps := make([]endpoint, len(u.addrs))
	for i, a := range u.addrs {
		eps[i] = a.addr
	}
	go healthCheck(ctx, u.cfg.Name, eps, *hc, b.post)
}

// Stop ends every active health check, re-resolution and every retry of a failed dial on
// another address, at shutdown.
func (b *Broker) Stop() {
	b.stopping = true
	b.stopGoroutines()
}

// stopGoroutines ends every active health check and re-resolution.
func (b *Broker) stopGoroutines() {
	for _, st := range b.upstreams {
		for _, stop := range []*func(){&st.stopCheck, &st.stopResolve} {
			if *stop != nil {
				(*stop)()
				*stop = nil
			}
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

// Info reports every upstream's budget and addresses, by name.
func (b *Broker) Info(now time.Time) []Info {
	out := make([]Info, 0, len(b.upstreams))
	for _, u := range b.upstreams {
		ui := Info{
			Name: u.cfg.Name, MaxConnections: u.cfg.MaxConnections, Share: b.share(u),
			Held: u.held, Dialing: u.dialing, Waiting: len(u.waiting), Reclaims: u.reclaims, ShareRefused: u.shareRefuse,
		}
		for _, a := range u.addrs {
			ai := AddressInfo{Address: a.addr.String(), Host: a.addr.host, State: "up", Fails: a.fails, Dials: a.dials, Failures: a.failures, LastError: a.lastError}
			switch {
			case a.checkFailed:
				ai.State = "check-failed"
			case a.probing:
				ai.State = "probing"
			case !a.downUntil.IsZero() && now.Before(a.downUntil):
				ai.State, ai.DownFor = "down", a.downUntil.Sub(now)
			case !a.downUntil.IsZero():
				ai.State = "probing" // the next dial probes it
			case a.fails >= u.cfg.MaxFails:
				ai.State = "failing"
			}
			ui.Addresses = append(ui.Addresses, ai)
		}
		out = append(out, ui)
	}
	slices.SortFunc(out, func(a, b Info) int { return strings.Compare(a.Name, b.Name) })
	return out
}
