package supervisor

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// setUpstreams matches the upstream table to the configuration, keeping the
// counts of upstreams that stay and the health of addresses that stay, and
// (re)starting the active health checks.
func (d *dispatcher) setUpstreams() {
	keep := make(map[string]*upstreamState, len(d.cfg.Upstreams))
	for _, u := range d.cfg.Upstreams {
		st := d.upstreams[u.Name]
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
	for _, st := range d.upstreams {
		if st.stopCheck != nil {
			st.stopCheck()
			st.stopCheck = nil
		}
	}
	d.upstreams = keep
	if d.stopping {
		return
	}
	for _, st := range d.upstreams {
		if hc := st.cfg.HealthCheck; hc != nil {
			ctx, cancel := context.WithCancel(context.Background())
			st.stopCheck = cancel
			addrs := slices.Clone(st.cfg.Addresses)
			go d.s.healthCheck(ctx, st.cfg.Name, addrs, *hc)
		}
	}
}

// stopHealthChecks ends every active health check.
func (d *dispatcher) stopHealthChecks() {
	for _, st := range d.upstreams {
		if st.stopCheck != nil {
			st.stopCheck()
			st.stopCheck = nil
		}
	}
}

// upstreamInfo reports every upstream's budget and addresses, by name.
func (d *dispatcher) upstreamInfo(now time.Time) []UpstreamInfo {
	out := make([]UpstreamInfo, 0, len(d.upstreams))
	for _, u := range d.upstreams {
		ui := UpstreamInfo{
			Name: u.cfg.Name, MaxConnections: u.cfg.MaxConnections, Share: d.upstreamShare(u),
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
	slices.SortFunc(out, func(a, b UpstreamInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}
