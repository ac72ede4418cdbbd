package supervisor

import (
	"context"
	"net/netip"
	"os"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/headend"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/handover"
	"github.com/gatehouse-dev/gatehouse/supervisor/limits"
	"github.com/gatehouse-dev/gatehouse/supervisor/view"
	"golang.org/x/sys/unix"
)

// The loop's side of a binary upgrade (docs/DESIGN.md §11). In the old
// supervisor, once the new one is ready (package handover started it):
// accepting stops, the limiter's and the penalty box's state and every
// parked connection that can move go to the new supervisor, and from then
// on every plain connection a worker returns kept alive goes too, instead
// of being parked. A TLS connection whose state a worker holds cannot move:
// the worker closes it (close_notify) when it is next idle. Streams and
// upgraded connections finish here. Once the loop holds no connection, or
// upgrade_grace has passed (what is left is closed), it stops as at a
// drain. In the new supervisor, the loop adopts what it is sent, and
// accepts only once the old supervisor's bulk has arrived, so that adopted
// connections join the timer lists in deadline order.

// handOverMsg begins the hand-over to a ready new supervisor.
type handOverMsg struct{ out *handover.Outbound }

// upgradeFailedMsg records a failed upgrade.
type upgradeFailedMsg struct{ reason string }

// upgradeStartingMsg records an upgrade whose new binary is starting.
type upgradeStartingMsg struct{ path string }

// ListenerFDs returns a duplicate of every listening socket, for the new
// supervisor; the caller closes them.
func (s *Supervisor) ListenerFDs(ctx context.Context) ([]handover.Listener, error) {
	reply := make(chan []handover.Listener, 1)
	f := loopFunc(func(d *dispatcher) {
		var out []handover.Listener
		for _, l := range d.listeners {
			fd, err := unix.FcntlInt(uintptr(l.fd), unix.F_DUPFD_CLOEXEC, 0)
			if err != nil {
				continue
			}
			out = append(out, handover.Listener{Name: l.name, Address: l.cfgAddr.String(), FD: fd})
		}
		reply <- out
	})
	select {
	case s.msgs <- f:
		s.wake()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case ls := <-reply:
		return ls, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// HandOver gives the loop's connections to the new supervisor behind out;
// Run returns once the loop holds none, within upgrade_grace.
func (s *Supervisor) HandOver(out *handover.Outbound) { s.post(handOverMsg{out: out}) }

// Adopt takes what the old supervisor sends (handover.Inbound.Run posts
// it): its limits, its connections, the end of its bulk.
func (s *Supervisor) Adopt(m any) { s.post(m) }

// UpgradeFailed counts an upgrade that did not happen, for the metrics.
func (s *Supervisor) UpgradeFailed(reason string) { s.post(upgradeFailedMsg{reason: reason}) }

// UpgradeStarting shows, until HandOver or UpgradeFailed, that the binary
// at path is starting to take over.
func (s *Supervisor) UpgradeStarting(path string) { s.post(upgradeStartingMsg{path: path}) }

// upgradeMessage handles the loop's upgrade messages.
func (d *dispatcher) upgradeMessage(m any, now time.Time) {
	u := &d.upgrade
	switch m := m.(type) {
	case handOverMsg:
		d.beginHandOver(m.out, now)
	case upgradeFailedMsg:
		u.failed++
		u.lastError, u.starting = m.reason, ""
	case upgradeStartingMsg:
		u.starting = m.path
	case handover.Progress:
		u.peerPID, u.oldDraining, u.oldStaying = m.PID, true, m.Staying
	case handover.State:
		for _, b := range m.Buckets {
			d.limiter.Import(b, now)
		}
		for _, p := range m.Penalties {
			d.penalties.Resume(p, now)
		}
	case handover.Conns:
		for i, h := range m.Conns {
			d.adopt(h, m.FDs[i], now)
		}
	case handover.BulkDone:
		d.releaseAccept()
	case handover.Closed:
		if m.Err != nil {
			d.log.Error("hand-over from the old supervisor ended early", "error", m.Err)
		}
		u.oldDraining, u.oldStaying = false, 0
		d.releaseAccept()
	}
}

func (d *dispatcher) releaseAccept() {
	if d.upgrade.holdAccept {
		d.upgrade.holdAccept = false
		d.log.Info("accepting", "adopted", d.upgrade.received)
		d.armListeners(true)
	}
}

// beginHandOver stops accepting and sends the limits and every parked
// connection that can move.
func (d *dispatcher) beginHandOver(out *handover.Outbound, now time.Time) {
	u := &d.upgrade
	if d.stopping || u.out != nil {
		out.Close()
		return
	}
	u.out, u.deadline, u.peerPID, u.peerVersion = out, now.Add(d.cfg.Limits.UpgradeGrace), out.PID, out.Version
	u.starting = ""
	u.names = make(map[uint32]string, len(d.listeners))
	for _, l := range d.listeners {
		u.names[uint32(l.id)] = l.name
	}
	// The listeners stay open (the new supervisor accepts on the same
	// sockets) but unarmed; stop closes them.
	d.armListeners(false)
	out.Queue(handover.StateFrame(d.limiter.Export(now), d.penalties.Export(now)), nil)
	n := 0
	// Each timer list in its order, so that the new supervisor's lists stay
	// sorted by deadline: fresh and proxy, idle, waiting, head.
	for _, id := range []listID{listFreshTimers, listIdleTimers, listWaitTimers, listGapTimers} {
		l := &d.lists[id]
		for c := l.first(); c != nil; {
			next := l.next(c)
			switch {
			case c.kept == nil || !c.tls:
				d.handOff(c, nil, now)
				n++
			case c.state != stateWaiting:
				d.closeQuietly(c)
			}
			c = next
		}
	}
	out.Flush()
	out.Queue(handover.BulkDoneFrame(n), nil)
	d.log.Info("handing over to the new supervisor", "pid", out.PID, "version", out.Version, "connections", n,
		"staying", d.conns.len(), "upgrade_grace", d.cfg.Limits.UpgradeGrace)
	d.signalPressure()
	d.upgradeTick(now)
}

// handDone takes a connection a worker returned kept alive during the
// hand-over, with its carried input. It reports false when the connection
// stays (a TLS connection with input pending is served first).
func (d *dispatcher) handDone(c *conn, m *proto.Done, now time.Time) bool {
	if d.upgrade.out == nil {
		return false
	}
	switch {
	case c.tls && m.GetPending():
		return false
	case c.tls && c.kept != nil:
		d.closeQuietly(c)
	case c.tls:
		d.upgrade.drained++
		d.closeConn(c)
	default:
		d.handOff(c, m.GetCarried(), now)
		d.upgrade.out.Flush()
	}
	return true
}

// handOff sends c to the new supervisor and forgets it without shutting it
// down. A connection coming back from a worker (at_worker) goes as idle,
// or with its carried input as a head or a waiting request.
func (d *dispatcher) handOff(c *conn, carried []byte, now time.Time) {
	u := &d.upgrade
	peer := c.peer.addrPort()
	h := &proto.HandedConn{Listener: u.names[c.listener], PeerIp: peer.Addr().AsSlice(), PeerPort: uint32(peer.Port()),
		Requests: c.requests, AgeNanos: int64(now.Sub(c.accepted.time())), Queued: c.fresh}
	switch c.state {
	case stateFresh:
		h.State = proto.HandedState_HANDED_FRESH
	case stateProxy:
		h.State = proto.HandedState_HANDED_PROXY
	case stateIdle:
		h.State, h.IdleLeftNanos = proto.HandedState_HANDED_IDLE, int64(max(0, c.deadline.time().Sub(now)))
	case stateHead:
		h.State, h.Head = proto.HandedState_HANDED_HEAD, c.hd.buf
		h.HeadAgeNanos, h.GapAgeNanos = int64(now.Sub(c.hd.firstByte)), int64(now.Sub(c.hd.lastByte))
	case stateWaiting:
		h.State, h.Head = proto.HandedState_HANDED_WAITING, c.carried
	default: // back from a worker
		switch {
		case len(carried) == 0:
			h.State, h.IdleLeftNanos = proto.HandedState_HANDED_IDLE, int64(d.cfg.Limits.KeepAliveIdleTimeout)
		case headend.Decided(carried):
			h.State, h.Head = proto.HandedState_HANDED_WAITING, carried
		default:
			h.State, h.Head = proto.HandedState_HANDED_HEAD, carried
		}
	}
	h.Head = append([]byte(nil), h.Head...)
	if c.flags&flagLowat != 0 {
		unix.SetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_RCVLOWAT, 1)
	}
	fd := c.fd
	d.unlink(c)
	u.out.Add(h, fd)
	u.sent++
}

// closeQuietly closes a TLS connection a worker holds the state of: the
// worker's Forget closes it with close_notify, so the supervisor neither
// shuts it down nor writes to it.
func (d *dispatcher) closeQuietly(c *conn) {
	fd := c.fd
	d.unlink(c)
	unix.Close(fd)
	d.upgrade.drained++
	d.c.closed++
}

// unlink forgets c as closeConn does, leaving its descriptor open (and the
// caller's) and the connection up.
func (d *dispatcher) unlink(c *conn) {
	d.leaveState(c, stateClosed)
	if c.flags&flagPolled != 0 {
		d.del(c.fd)
	}
	d.forget(c)
	cl := c.client
	cl.conns--
	if cl.conns == 0 && cl.out == 0 {
		delete(d.clients, cl.key)
	}
	d.conns.release(c)
}

// upgradeTick ends the old side's hand-over once the loop holds no
// connection, or at upgrade_grace, closing what is left; then the loop
// stops as at a drain.
func (d *dispatcher) upgradeTick(now time.Time) {
	u := &d.upgrade
	if u.out == nil {
		return
	}
	if !now.Before(u.nextProgress) {
		u.nextProgress = now.Add(time.Second)
		u.out.Queue(handover.ProgressFrame(handover.Progress{PID: os.Getpid(), Staying: d.conns.len(), Sent: u.sent, Drained: u.drained}), nil)
	}
	if d.conns.len() > 0 && now.Before(u.deadline) {
		return
	}
	if n := d.conns.len(); n > 0 {
		d.log.Warn("upgrade_grace over: closing the connections left", "connections", n)
		for c := range d.conns.all() {
			u.drained++
			if c.state == stateAtWorker {
				// Its worker ends the stream or the round and returns
				// it; stop closes it then.
				unix.Shutdown(c.fd, unix.SHUT_RDWR)
				continue
			}
			d.closeConn(c)
		}
	}
	sent, lost := u.out.Counts()
	d.log.Info("hand-over complete", "sent", u.sent, "sent_so_far", sent, "lost", lost, "drained", u.drained)
	u.out.Close()
	u.out = nil
	d.stop(now)
}

// upgradeDeadline is the old side's next progress report or its
// upgrade_grace deadline, or zero.
func (d *dispatcher) upgradeDeadline() time.Time {
	if d.upgrade.out == nil {
		return time.Time{}
	}
	if d.upgrade.nextProgress.Before(d.upgrade.deadline) {
		return d.upgrade.nextProgress
	}
	return d.upgrade.deadline
}

// adopt takes one connection from the old supervisor into the state it
// was in there, its deadlines as the time they had left.
func (d *dispatcher) adopt(h *proto.HandedConn, fd int, now time.Time) {
	u := &d.upgrade
	id, ok := d.listenerID(h.GetListener())
	ip, ipOK := netip.AddrFromSlice(h.GetPeerIp())
	if !ok || !ipOK || d.stopping {
		// Its listener is gone from the new configuration.
		unix.Close(fd)
		u.drained++
		return
	}
	peer := netip.AddrPortFrom(ip, uint16(h.GetPeerPort()))
	key := limits.ClientKey(peer.Addr(), d.cfg.IPv6ClientPrefixLength)
	cl := d.clients[key]
	if cl == nil {
		cl = newClient(key, d.trusted(peer.Addr()), &d.conns)
	}
	c := d.conns.alloc()
	if c == nil {
		unix.Close(fd)
		u.drained++
		return
	}
	c.fd, c.client, c.listener, c.peer, c.tls = fd, cl, uint32(id), packPeer(peer), d.tlsListener(h.GetListener())
	c.accepted, c.requests = monoOf(now.Add(-time.Duration(h.GetAgeNanos()))), h.GetRequests()
	if err := d.add(fd, kindConn, c.id, connInterest); err != nil {
		d.conns.release(c)
		unix.Close(fd)
		u.drained++
		return
	}
	c.flags |= flagPolled
	d.clients[key] = cl
	cl.conns++
	u.received++
	requeue := func() {
		if h.GetQueued() {
			c.fresh = true
			d.queued++
		}
	}
	switch h.GetState() {
	case proto.HandedState_HANDED_FRESH:
		d.setState(c, stateFresh, now)
	case proto.HandedState_HANDED_PROXY:
		d.setState(c, stateProxy, now)
	case proto.HandedState_HANDED_IDLE:
		d.setState(c, stateIdle, now)
		c.deadline = monoOf(now.Add(time.Duration(h.GetIdleLeftNanos())))
	case proto.HandedState_HANDED_HEAD:
		c.hd = &headState{buf: h.GetHead()}
		d.setState(c, stateHead, now)
		c.hd.firstByte = now.Add(-time.Duration(h.GetHeadAgeNanos()))
		c.hd.lastByte = now.Add(-time.Duration(h.GetGapAgeNanos()))
		requeue()
	default:
		c.carried = h.GetHead()
		requeue()
		d.tryDispatch(c, now)
	}
}

// listenerID finds the listener named name.
func (d *dispatcher) listenerID(name string) (uint64, bool) {
	for _, l := range d.listeners {
		if l.name == name {
			return l.id, true
		}
	}
	return 0, false
}

// upgradeSnapshot adds the upgrade's state and counters.
func (d *dispatcher) upgradeSnapshot(s *view.Snapshot) {
	u := &d.upgrade
	s.Upgrade = view.UpgradeInfo{HandingOver: u.out != nil, PeerPID: u.peerPID, PeerVersion: u.peerVersion,
		Sent: u.sent, Received: u.received, Drained: u.drained, Failed: u.failed, LastError: u.lastError,
		Starting: u.starting, OldDraining: u.oldDraining}
	switch {
	case u.out != nil:
		s.Upgrade.Staying = d.conns.len()
	case u.oldDraining:
		s.Upgrade.Staying = u.oldStaying
	}
	s.Counters["upgrade_conns_handed_over"] = u.sent
	s.Counters["upgrade_conns_adopted"] = u.received
	s.Counters["upgrade_conns_drained"] = u.drained
	s.Counters["upgrades_failed"] = u.failed
}
