package supervisor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/proto"
	"golang.org/x/sys/unix"
)

// Upstream connections brokered for workers (docs/DESIGN.md §4.2).
//
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

// upstreamState is one upstream's budget and address health. Owned by the loop.
type upstreamState struct {
	cfg     config.Upstream
	addrs   []*addrState // one per cfg.Addresses, in order
	held    int          // given to workers and not released
	dialing int
	next    int           // round robin over addrs
	waiting []waitingDial // dials waiting for reclaimed connections, oldest first
	// stopCheck ends the active health check, or is nil.
	stopCheck context.CancelFunc

	reclaims    uint64 // Reclaim notices sent
	shareRefuse uint64 // dials refused over a worker's share
}

// addrState is one upstream address's health and counters.
type addrState struct {
	addr      netip.AddrPort
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
	slot     int
	gen      uint64
	id       uint64
	deadline time.Time
}

// heldConn is the supervisor's copy of an upstream socket a worker holds.
type heldConn struct {
	fd       int
	upstream string
}

// dialResult is what a dialing goroutine posts back.
type dialResult struct {
	slot     int
	gen      uint64
	id       uint64
	upstream string
	addr     int            // index into the upstream's addresses
	addrPort netip.AddrPort // that address, to match it after a reload
	tried    []int          // the addresses this request has tried
	fd       int            // the worker's descriptor, or -1
	keep     int            // the supervisor's copy, or -1
	err      error
}

// share is how many connections to u one worker may hold.
func (d *dispatcher) upstreamShare(u *upstreamState) int {
	n := max(1, d.cfg.Workers.Count)
	return (u.cfg.MaxConnections + n - 1) / n
}

// dial starts a connection to a configured upstream on the worker's behalf,
// or waits for reclaimed connections, or refuses at once. The request holds
// an in-flight slot until its reply.
func (d *dispatcher) dial(w *workerProc, id uint64, name string, now time.Time) bool {
	u := d.upstreams[name]
	if w.held[name] >= d.upstreamShare(u) {
		u.shareRefuse++
		d.refuseDial(w, id, "worker's share of max_connections in use")
		return true
	}
	if u.held+u.dialing >= u.cfg.MaxConnections {
		if d.reclaimFor(u, w) {
			u.waiting = append(u.waiting, waitingDial{slot: w.slot, gen: w.gen, id: id, deadline: now.Add(reclaimWait)})
			return true
		}
		d.refuseDial(w, id, "upstream at max_connections")
		return true
	}
	d.startDial(u, w, id, nil, now)
	return true
}

// refuseDial answers a Dial with a refusal, releasing its in-flight slot
// first.
func (d *dispatcher) refuseDial(w *workerProc, id uint64, why string) {
	w.slots.Release()
	d.c.upstreamRefused++
	d.send(w, &proto.Frame{Id: id, Body: &proto.Frame_DialReply{DialReply: &proto.DialReply{Refused: true, Error: why}}}, -1)
}

// startDial dials the next address in rotation not yet tried for this
// request; w's in-flight slot is taken. With no address left it answers the
// request with an error.
func (d *dispatcher) startDial(u *upstreamState, w *workerProc, id uint64, tried []int, now time.Time) {
	k, ok := u.pick(now, tried)
	if !ok {
		w.slots.Release()
		d.c.upstreamErrors++
		d.send(w, &proto.Frame{Id: id, Body: &proto.Frame_DialReply{DialReply: &proto.DialReply{Error: "no live upstream address"}}}, -1)
		return
	}
	a := u.addrs[k]
	a.dials++
	u.dialing++
	if w.held == nil {
		w.held = make(map[string]int)
	}
	w.held[u.cfg.Name]++
	r := dialResult{slot: w.slot, gen: w.gen, id: id, upstream: u.cfg.Name, addr: k, addrPort: a.addr, tried: append(tried, k)}
	go d.s.dial(r, u.cfg.ConnectTimeout)
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
func (s *Supervisor) dial(r dialResult, timeout time.Duration) {
	r.fd, r.keep = -1, -1
	c, err := (&net.Dialer{Timeout: timeout}).Dial("tcp", r.addrPort.String())
	if err != nil {
		r.err = err
		s.post(r)
		return
	}
	rc, err := c.(*net.TCPConn).SyscallConn()
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
	s.post(r)
}

func closeFDs(fds ...int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// dialed records a finished dial's outcome for its address, then hands the
// connection to its worker (releasing the request's slot before the reply
// is written), or tries the next address, or answers the failure.
func (d *dispatcher) dialed(r dialResult, now time.Time) {
	u := d.upstreams[r.upstream]
	if u != nil {
		u.dialing--
		if r.addr < len(u.addrs) && u.addrs[r.addr].addr == r.addrPort {
			d.addrResult(u, u.addrs[r.addr], r.err, now)
		}
	}
	w := d.workerFor(r.slot, r.gen)
	if w == nil || w.ch == nil {
		closeFDs(r.fd, r.keep)
		if u != nil {
			d.upstreamFreed(u, now)
		}
		return
	}
	w.held[r.upstream]--
	switch {
	case r.err == nil && u == nil:
		// The upstream left the configuration while dialing.
		closeFDs(r.fd, r.keep)
		r.err = errors.New("upstream no longer configured")
	case r.err != nil && u != nil && !d.stopping && len(r.tried) < len(u.addrs):
		d.startDial(u, w, r.id, r.tried, now)
		return
	}
	if r.err != nil {
		w.slots.Release()
		d.c.upstreamErrors++
		var ne net.Error
		timedOut := errors.As(r.err, &ne) && ne.Timeout()
		d.send(w, &proto.Frame{Id: r.id, Body: &proto.Frame_DialReply{DialReply: &proto.DialReply{Error: r.err.Error(), TimedOut: timedOut}}}, -1)
		if u != nil {
			d.upstreamFreed(u, now)
		}
		return
	}
	d.nextUpConn++
	if w.upConns == nil {
		w.upConns = make(map[uint64]heldConn)
	}
	w.upConns[d.nextUpConn] = heldConn{fd: r.keep, upstream: r.upstream}
	d.heldFDs++
	w.held[r.upstream]++
	u.held++
	w.slots.Release()
	d.sendOwned(w, &proto.Frame{Id: r.id, Body: &proto.Frame_DialReply{DialReply: &proto.DialReply{Ok: true, Conn: d.nextUpConn}}}, r.fd)
}

// addrResult updates an address's passive health with a dial's outcome.
func (d *dispatcher) addrResult(u *upstreamState, a *addrState, err error, now time.Time) {
	a.probing = false
	if err == nil {
		if !a.downUntil.IsZero() {
			d.log.Info("upstream address back in rotation", "upstream", u.cfg.Name, "address", a.addr)
		}
		a.fails, a.downUntil = 0, time.Time{}
		return
	}
	a.failures++
	a.fails++
	a.lastError = err.Error()
	if len(u.addrs) > 1 && a.fails >= u.cfg.MaxFails {
		if a.downUntil.IsZero() {
			d.log.Warn("upstream address out of rotation", "upstream", u.cfg.Name, "address", a.addr,
				"fail_timeout", u.cfg.FailTimeout, "error", err)
		}
		a.downUntil = now.Add(u.cfg.FailTimeout)
	}
}

// releaseUpstream handles an UpstreamRelease of a connection w holds (the
// frame table checked): the supervisor's copy is shut down and closed before
// the connection counts as free.
func (d *dispatcher) releaseUpstream(w *workerProc, rel *proto.UpstreamRelease, now time.Time) {
	name := rel.GetUpstream()
	hc := w.upConns[rel.GetConn()]
	delete(w.upConns, rel.GetConn())
	shutClose(hc.fd)
	d.heldFDs--
	w.held[name]--
	if u := d.upstreams[name]; u != nil {
		u.held--
		d.upstreamFreed(u, now)
	}
}

// shutClose shuts a socket down for every descriptor of it, then closes ours.
func shutClose(fd int) {
	unix.Shutdown(fd, unix.SHUT_RDWR)
	unix.Close(fd)
}

// releaseUpstreams kills the upstream connections of a gone worker process:
// any copy of them it passed on is dead too.
func (d *dispatcher) releaseUpstreams(w *workerProc, now time.Time) {
	freed := map[string]bool{}
	for _, hc := range w.upConns {
		shutClose(hc.fd)
		d.heldFDs--
		if u := d.upstreams[hc.upstream]; u != nil {
			u.held--
			freed[hc.upstream] = true
		}
	}
	w.upConns, w.held, w.reclaiming = nil, nil, nil
	for name := range freed {
		d.upstreamFreed(d.upstreams[name], now)
	}
}

// reclaimFor asks every other worker holding connections to u to close its
// idle ones. It reports whether any answer is to come.
func (d *dispatcher) reclaimFor(u *upstreamState, requester *workerProc) bool {
	name := u.cfg.Name
	pending := false
	for _, o := range d.workers {
		if o == requester || o.ch == nil || (o.state != workerReady && o.state != workerDraining) {
			continue
		}
		if o.reclaiming[name] {
			pending = true
			continue
		}
		holds := false
		for _, hc := range o.upConns {
			if hc.upstream == name {
				holds = true
				break
			}
		}
		if !holds {
			continue
		}
		if o.reclaiming == nil {
			o.reclaiming = make(map[string]bool)
		}
		o.reclaiming[name] = true
		u.reclaims++
		d.send(o, &proto.Frame{Body: &proto.Frame_Reclaim{Reclaim: &proto.Reclaim{Upstream: name}}}, -1)
		pending = true
	}
	return pending
}

// reclaimed handles a worker's answer to a Reclaim it was sent (the frame
// table checked); its releases came first.
func (d *dispatcher) reclaimed(w *workerProc, name string, now time.Time) {
	delete(w.reclaiming, name)
	if u := d.upstreams[name]; u != nil {
		d.upstreamFreed(u, now)
	}
}

// upstreamFreed serves u's waiting dials in order once the budget allows,
// and refuses those past their wait or with nothing more to come back.
func (d *dispatcher) upstreamFreed(u *upstreamState, now time.Time) {
	for len(u.waiting) > 0 {
		wd := u.waiting[0]
		w := d.workerFor(wd.slot, wd.gen)
		switch {
		case w == nil || w.ch == nil:
		case u.held+u.dialing < u.cfg.MaxConnections && w.held[u.cfg.Name] < d.upstreamShare(u):
			d.startDial(u, w, wd.id, nil, now)
		case now.Before(wd.deadline) && d.reclaimPending(u):
			return
		default:
			d.refuseDial(w, wd.id, "upstream at max_connections")
		}
		u.waiting = u.waiting[1:]
	}
	u.waiting = nil
}

// reclaimPending reports whether a worker has yet to answer a Reclaim for u.
func (d *dispatcher) reclaimPending(u *upstreamState) bool {
	for _, w := range d.workers {
		if w.ch != nil && w.reclaiming[u.cfg.Name] {
			return true
		}
	}
	return false
}

// expireDials refuses the waiting dials past their wait.
func (d *dispatcher) expireDials(now time.Time) {
	for _, u := range d.upstreams {
		if len(u.waiting) > 0 && !now.Before(u.waiting[0].deadline) {
			d.upstreamFreed(u, now)
		}
	}
}

// dialDeadline is the earliest waiting dial's deadline, or zero.
func (d *dispatcher) dialDeadline() time.Time {
	var t time.Time
	for _, u := range d.upstreams {
		if len(u.waiting) > 0 && (t.IsZero() || u.waiting[0].deadline.Before(t)) {
			t = u.waiting[0].deadline
		}
	}
	return t
}
