package upstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
)

// Addresses: an upstream's configured addresses become the endpoints the
// broker dials. An IP:port literal and a Unix socket path are one endpoint
// each; a host name is resolved by the supervisor, never by a worker (which
// has no network and no resolver), at start, at each reload and each
// resolve_interval, and every A and AAAA address it has becomes an endpoint
// in the name's place. A name that fails to resolve at start fails the
// start; later, it keeps the addresses it had, with one warning until it
// resolves again. Resolution happens off the loop (Resolve in the reload's
// goroutine, re-resolution in one goroutine per upstream), which gets the
// result by message.

// resolveTimeout bounds one resolution of every host name of an upstream.
const resolveTimeout = 10 * time.Second

// endpoint is one address the broker dials: an IP and port, or a Unix
// stream socket's path.
type endpoint struct {
	ap   netip.AddrPort
	unix string
	// host is the configured "name:port" ap was resolved from, or "".
	host string
}

func (e endpoint) network() string {
	if e.unix != "" {
		return "unix"
	}
	return "tcp"
}

// address is what net.Dial takes.
func (e endpoint) address() string {
	if e.unix != "" {
		return e.unix
	}
	return e.ap.String()
}

// String is the endpoint as the admin view and the metrics show it:
// "unix:/run/app.sock" or an IP and port.
func (e endpoint) String() string {
	if e.unix != "" {
		return "unix:" + e.unix
	}
	return e.ap.String()
}

// Resolved is the addresses each host name resolved to, by its configured
// "name:port" (config.Address.String).
type Resolved map[string][]netip.AddrPort

// Resolve resolves every host name among the upstreams' addresses. What
// resolved is returned even when others failed; the error names each that
// did not.
func Resolve(ctx context.Context, ups []config.Upstream) (Resolved, error) {
	out := Resolved{}
	var errs []error
	for _, u := range ups {
		r, err := resolveHosts(ctx, u)
		for k, v := range r {
			out[k] = v
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return out, errors.Join(errs...)
}

// resolveHosts resolves u's host names, within resolveTimeout.
func resolveHosts(ctx context.Context, u config.Upstream) (Resolved, error) {
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	out := Resolved{}
	var errs []error
	for _, a := range u.Addresses {
		if a.Host == "" {
			continue
		}
		ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", a.Host)
		if err == nil && len(ips) == 0 {
			err = errors.New("no address")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("upstream %s: resolving %s: %w", u.Name, a, err))
			continue
		}
		var aps []netip.AddrPort
		for _, ip := range ips {
			ap := netip.AddrPortFrom(ip.Unmap(), a.Port)
			if !slices.Contains(aps, ap) {
				aps = append(aps, ap)
			}
		}
		out[a.String()] = aps
	}
	return out, errors.Join(errs...)
}

// ResolveResult is one re-resolution of an upstream's host names, posted
// to the loop.
type ResolveResult struct {
	upstream string
	resolved Resolved
	err      error
}

// reresolve resolves the host names of u each resolve_interval until ctx
// ends, posting each outcome.
func reresolve(ctx context.Context, u config.Upstream, post func(any)) {
	t := time.NewTicker(u.ResolveInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r, err := resolveHosts(ctx, u)
		if ctx.Err() != nil {
			return
		}
		post(ResolveResult{upstream: u.Name, resolved: r, err: err})
	}
}

// Reresolved applies a re-resolution: the names that resolved take their
// new addresses, the others keep theirs.
func (b *Broker) Reresolved(r ResolveResult, now time.Time) {
	u := b.upstreams[r.upstream]
	if u == nil || b.stopping {
		return
	}
	b.applyResolved(u, r.resolved, r.err)
	if b.setEndpoints(u) {
		b.restartHealthCheck(u)
	}
	b.freed(u, now)
}

// applyResolved records what u's host names resolved to, and logs a
// failure once until its name resolves again.
func (b *Broker) applyResolved(u *upstreamState, r Resolved, err error) {
	if u.names == nil {
		u.names = make(map[string][]netip.AddrPort)
	}
	for _, a := range u.cfg.Addresses {
		if a.Host == "" {
			continue
		}
		key := a.String()
		if aps, ok := r[key]; ok {
			if u.resolveFailing[key] {
				b.log.Info("upstream host name resolves again", "upstream", u.cfg.Name, "host", key, "addresses", len(aps))
				delete(u.resolveFailing, key)
			}
			u.names[key] = aps
			continue
		}
		if !u.resolveFailing[key] {
			if u.resolveFailing == nil {
				u.resolveFailing = make(map[string]bool)
			}
			u.resolveFailing[key] = true
			b.log.Warn("upstream host name did not resolve; its previous addresses are kept", "upstream", u.cfg.Name,
				"host", key, "addresses_kept", len(u.names[key]), "error", err)
		}
	}
}

// setEndpoints makes u's endpoints from its configured addresses and the
// names' resolved addresses, keeping the health of those it had. It
// reports whether the set changed.
func (b *Broker) setEndpoints(u *upstreamState) bool {
	var eps []endpoint
	add := func(e endpoint) {
		if !slices.ContainsFunc(eps, func(o endpoint) bool { return o.ap == e.ap && o.unix == e.unix }) {
			eps = append(eps, e)
		}
	}
	for _, a := range u.cfg.Addresses {
		switch {
		case a.Unix != "":
			add(endpoint{unix: a.Unix})
		case a.Host != "":
			for _, ap := range u.names[a.String()] {
				add(endpoint{ap: ap, host: a.String()})
			}
		default:
			add(endpoint{ap: a.AddrPort})
		}
	}
	old := make(map[endpoint]*addrState, len(u.addrs))
	for _, a := range u.addrs {
		old[a.addr] = a
	}
	changed := len(eps) != len(u.addrs)
	addrs := make([]*addrState, 0, len(eps))
	for i, e := range eps {
		a := old[e]
		if a == nil {
			a = &addrState{addr: e}
		}
		changed = changed || u.addrs[i] != a
		addrs = append(addrs, a)
	}
	if changed && u.names != nil {
		b.log.Info("upstream addresses", "upstream", u.cfg.Name, "addresses", fmt.Sprint(eps))
	}
	u.addrs = addrs
	return changed
}
