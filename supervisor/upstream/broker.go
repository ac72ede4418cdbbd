// Package upstream is the supervisor's broker of upstream connections for
// workers (docs/DESIGN.md §4.2): the budget of each upstream, the passive
// and active health of its addresses, the dials, and the supervisor's own
// copy of every socket a worker holds. It is owned by the loop, which calls
// it for the frames workers send and for the results its goroutines post;
// it reaches the workers only through the Worker interface.
package upstream

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"syscall"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// Budget: an upstream's max_connections counts the connections held by
// workers (in use or idle in their pools) and being dialed. Each worker may
// hold at most its share, max_connections divided among the workers and
// rounded up, so one worker's greed costs only itself. When the budget is
// spent, the dial waits (at most reclaimWait) while the other workers are
// asked to close the idle connections they pool (Reclaim); what they give
// back goes to it, and if nothing comes back it is refused. So in effect
// only connections in use count, as nginx's max_conns.
//
// Release: the supervisor keeps its own copy of every socket it hands out.
// A release (or the worker's death) shuts that copy down (SHUT_RDWR) before
// the connection counts as free, so a copy the worker kept is dead.
//
// Health: an address whose dials fail or time out max_fails times in a row
// leaves the rotation for fail_timeout, then one dial probes it (nginx's
// max_fails and fail_timeout; as in nginx, an upstream with one address is
// never taken out). A failed dial is retried on the next address. The
// optional health_check probes every address from the supervisor.

// reclaimWait bounds how long a dial waits for other workers to give back
// idle pooled connections before it is refused.
const reclaimWait = time.Second

// Worker is one live worker process as the broker sees it: from its first
// Dial to Release. The loop's value for it must compare equal across calls
// and differ between two processes of one slot.
type Worker interface {
	// DialReply answers the worker's Dial request id, handing it fd when
	// fd >= 0 (the loop closes fd once sent). The loop releases the
	// request's in-flight slot first.
	DialReply(id uint64, r *proto.DialReply, fd int)
	// Reclaimable reports whether the worker can be asked to Reclaim now.
	Reclaimable() bool
	// Reclaim asks the worker to close its idle pooled connections to
	// upstream.
	Reclaim(upstream string)
}

// Broker holds every configured upstream and what each worker holds of
// them. Owned by the loop.
type Broker struct {
	log hclog.Logger
	// post hands a goroutine's result (a DialResult or a HealthResult) to
	// the loop, which passes it back to Dialed or HealthChecked.
	post      func(any)
	upstreams map[string]*upstreamState
	workers   map[Worker]*holding
	// workerCount divides max_connections into shares.
	workerCount int
	stopping    bool
	// nextConn is the last upstream connection id given out.
	nextConn uint64
	// heldFDs counts the copies of upstream sockets held.
	heldFDs int
}

// holding is what one worker process holds of the upstreams.
type holding struct {
	// held counts, by upstream, the connections given to the process or
	// being dialed for it, until it releases them or dies: what its share
	// of max_connections is checked against.
	held map[string]int
	// conns holds the supervisor's own copy of every upstream socket given
	// to the process, by the id its DialReply named.
	conns map[uint64]heldConn
	// reclaiming names the upstreams the process was sent Reclaim for and
	// has not answered yet.
	reclaiming map[string]bool
	// gone is set when the process is released: the results of its dials
	// still under way are dropped.
	gone bool
}

// upstreamState is one upstream's budget and address health.
type upstreamState struct {
	cfg     config.Upstream
	addrs   []*addrState // one per endpoint of cfg.Addresses, in order
	held    int          // given to workers and not released
	dialing int
	next    int           // round robin over addrs
	waiting []waitingDial // dials waiting for reclaimed connections, oldest first
	// stopCheck ends the active health check, or is nil.
	stopCheck func()
	// names holds what each host name among the addresses resolved to
	// last, by "name:port"; resolveFailing the names whose last
	// resolution failed (warned about once); stopResolve ends the
	// re-resolution, or is nil.
	names          map[string][]netip.AddrPort
	resolveFailing map[string]bool
	stopResolve    func()

	reclaims    uint64 // Reclaim notices sent
	shareRefuse uint64 // dials refused over a worker's share
}

// addrState is one upstream address's health and counters.
type addrState struct {
	addr      endpoint
	fails     int       // consecutive dial failures or timeouts
	downUntil time.Time // out of rotation until then; zero when in
	probing   bool      // a dial probes it after downUntil
	// checkFailed is the active health check's last verdict.
	checkFailed bool
	dials       uint64
	failures    uint64
	lastError   string
}

// waitingDial is a worker's Dial waiting for the budget. It holds its
// in-flight slot.
type waitingDial struct {
	w        Worker
	h        *holding
	id       uint64
	deadline time.Time
}

// heldConn is the supervisor's copy of an upstream socket a worker holds.
type heldConn struct {
	fd       int
	upstream string
}

// DialResult is what a dialing goroutine posts back to the loop.
type DialResult struct {
	w        Worker
	h        *holding
	id       uint64
	upstream string
	addr     int      // index into the upstream's addresses
	endpoint endpoint // that address, to match it after a reload
	tried    []int    // the addresses this request has tried
	fd       int      // the worker's descriptor, or -1
	keep     int      // the supervisor's copy, or -1
	err      error
}

// New returns a broker with no upstream yet (see Configure). post hands a
// goroutine's result to the loop; it may block, and is never called by the
// loop itself.
func New(log hclog.Logger, post func(any)) *Broker {
	return &Broker{log: log, post: post, upstreams: make(map[string]*upstreamState), workers: make(map[Worker]*holding)}
}

// Known reports whether name is a configured upstream.
func (b *Broker) Known(name string) bool { return b.upstreams[name] != nil }

// HeldFDs is the number of descriptors the broker holds: its copies of the
// sockets workers hold.
func (b *Broker) HeldFDs() int { return b.heldFDs }

// holding returns w's record, made on its first use.
func (b *Broker) holding(w Worker) *holding {
	h := b.workers[w]
	if h == nil {
		h = &holding{held: make(map[string]int)}
		b.workers[w] = h
	}
	return h
}

// share is how many connections to u one worker may hold.
func (b *Broker) share(u *upstreamState) int {
	return u.cfg.WorkerShare(b.workerCount)
}

// Dial starts a connection to a configured upstream (Known) on w's behalf,
// or waits for reclaimed connections, or refuses at once. The request holds
// an in-flight slot until its reply.
func (b *Broker) Dial(w Worker, id uint64, name string, now time.Time) {
	u := b.upstreams[name]
	h := b.holding(w)
	if h.held[name] >= b.share(u) {
		u.shareRefuse++
		refuse(w, id, "worker's share of max_connections in use")
		return
	}
	if u.held+u.dialing >= u.cfg.MaxConnections {
		if b.reclaimFor(u, w) {
			u.waiting = append(u.waiting, waitingDial{w: w, h: h, id: id, deadline: now.Add(reclaimWait)})
			return
		}
		refuse(w, id, "upstream at max_connections")
		return
	}
	b.startDial(u, w, h, id, nil, now)
}

// refuse answers a Dial with a refusal.
func refuse(w Worker, id uint64, why string) {
	w.DialReply(id, &proto.DialReply{Refused: true, Error: why}, -1)
}

// startDial dials the next address in rotation not yet tried for this
// request; w's in-flight slot is taken. With no address left it answers the
// request with an error.
func (b *Broker) startDial(u *upstreamState, w Worker, h *holding, id uint64, tried []int, now time.Time) {
	k, ok := u.pick(now, tried)
	if !ok {
		w.DialReply(id, &proto.DialReply{Error: "no live upstream address"}, -1)
		return
	}
	a := u.addrs[k]
	a.dials++
	u.dialing++
	h.held[u.cfg.Name]++
	r := DialResult{w: w, h: h, id: id, upstream: u.cfg.Name, addr: k, endpoint: a.addr, tried: append(tried, k)}
	go dial(r, u.cfg.ConnectTimeout, b.post)
}

// pick returns the next address in rotation: not tried yet, not failing its
// health check, and not out for fail_timeout (past it, one dial probes it).
func (u *upstreamState) pick(now time.Time, tried []int) (int, bool) {
	n := len(u.addrs)
	for i := 0; i < n; i++ {
		k := (u.next + i) % n
		a := u.addrs[k]
		if slices.Contains(tried, k) || a.checkFailed {
			continue
		}
		if !a.downUntil.IsZero() {
			if now.Before(a.downUntil) || a.probing {
				continue
			}
			a.probing = true
		}
		u.next = k + 1
		return k, true
	}
	return -1, false
}

// dial connects to r's address within timeout and posts the result with two
// close-on-exec descriptors of the socket: one for the worker, one the
// supervisor keeps until the release.
func dial(r DialResult, timeout time.Duration, post func(any)) {
	r.fd, r.keep = -1, -1
	c, err := (&net.Dialer{Timeout: timeout}).Dial(r.endpoint.network(), r.endpoint.address())
	if err != nil {
		r.err = err
		post(r)
		return
	}
	// A TCP or a Unix stream socket: the worker speaks HTTP/1.1 over
	// either alike.
	rc, err := c.(syscall.Conn).SyscallConn()
	if err == nil {
		cerr := rc.Control(func(fd uintptr) {
			if r.fd, err = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0); err == nil {
				r.keep, err = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
			}
		})
		if err == nil {
			err = cerr
		}
	}
	c.Close()
	if err != nil {
		closeFDs(r.fd, r.keep)
		r.fd, r.keep = -1, -1
		r.err = fmt.Errorf("duplicating the upstream socket: %w", err)
	}
	post(r)
}

func closeFDs(fds ...int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// Dialed records a finished dial's outcome for its address, then hands the
// connection to its worker, or tries the next address, or answers the
// failure.
func (b *Broker) Dialed(r DialResult, now time.Time) {
	u := b.upstreams[r.upstream]
	if u != nil {
		u.dialing--
		if r.addr < len(u.addrs) && u.addrs[r.addr].addr == r.endpoint {
			b.addrResult(u, u.addrs[r.addr], r.err, now)
		}
	}
	if r.h.gone {
		closeFDs(r.fd, r.keep)
		if u != nil {
			b.freed(u, now)
		}
		return
	}
	h := r.h
	h.held[r.upstream]--
	switch {
	case r.err == nil && u == nil:
		// The upstream left the configuration while dialing.
		closeFDs(r.fd, r.keep)
		r.err = errors.New("upstream no longer configured")
	case r.err != nil && u != nil && !b.stopping && len(r.tried) < len(u.addrs):
		b.startDial(u, r.w, h, r.id, r.tried, now)
		return
	}
	if r.err != nil {
		var ne net.Error
		timedOut := errors.As(r.err, &ne) && ne.Timeout()
		r.w.DialReply(r.id, &proto.DialReply{Error: r.err.Error(), TimedOut: timedOut}, -1)
		if u != nil {
			b.freed(u, now)
		}
		return
	}
	b.nextConn++
	if h.conns == nil {
		h.conns = make(map[uint64]heldConn)
	}
	h.conns[b.nextConn] = heldConn{fd: r.keep, upstream: r.upstream}
	b.heldFDs++
	h.held[r.upstream]++
	u.held++
	r.w.DialReply(r.id, &proto.DialReply{Ok: true, Conn: b.nextConn}, r.fd)
}

// addrResult updates an address's passive health with a dial's outcome.
// An upstream's only address stays in rotation, as in nginx (taking it out
// would refuse every request for fail_timeout), but is shown "failing" once
// max_fails dials in a row failed.
func (b *Broker) addrResult(u *upstreamState, a *addrState, err error, now time.Time) {
	a.probing = false
	if err == nil {
		if !a.downUntil.IsZero() || a.fails >= u.cfg.MaxFails {
			b.log.Info("upstream address back in rotation", "upstream", u.cfg.Name, "address", a.addr.String())
		}
		a.fails, a.downUntil = 0, time.Time{}
		return
	}
	a.failures++
	a.fails++
	a.lastError = err.Error()
	switch {
	case a.fails < u.cfg.MaxFails:
	case len(u.addrs) > 1:
		if a.downUntil.IsZero() {
			b.log.Warn("upstream address out of rotation", "upstream", u.cfg.Name, "address", a.addr.String(),
				"fail_timeout", u.cfg.FailTimeout, "error", err)
		}
		a.downUntil = now.Add(u.cfg.FailTimeout)
	case a.fails == u.cfg.MaxFails:
		b.log.Warn("upstream address failing; as the upstream's only address it is still dialed", "upstream", u.cfg.Name,
			"address", a.addr.String(), "fails", a.fails, "error", err)
	}
}
