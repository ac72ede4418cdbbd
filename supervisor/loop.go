package supervisor

import (
	"net/netip"
	"os"
	"runtime"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/headend"
	"github.com/gatehouse-dev/gatehouse/internal/sysio"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/canned"
	"github.com/gatehouse-dev/gatehouse/supervisor/cluster"
	"github.com/gatehouse-dev/gatehouse/supervisor/internal/poll"
	"github.com/gatehouse-dev/gatehouse/supervisor/limits"
	"github.com/gatehouse-dev/gatehouse/supervisor/secrets"
	"github.com/gatehouse-dev/gatehouse/supervisor/spawn"
	"github.com/gatehouse-dev/gatehouse/supervisor/upstream"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

const maxEvents = 256

// newDispatcher makes the loop's state from what New prepared (s.boot),
// which it takes over, and arms the listeners unless an upgrade holds them.
func newDispatcher(s *Supervisor) (*dispatcher, error) {
	boot := s.boot
	s.boot = loopInit{}
	d := &dispatcher{
		s:        s,
		cfg:      boot.cfg,
		log:      s.log.Named("dispatcher"),
		p:        s.poller,
		events:   make([]poll.Event, maxEvents),
		scratch:  make([]byte, lingerBuf),
		logLimit: make(map[string]time.Time),
		acceptor: acceptor{
			listeners:    boot.listeners,
			nextListener: uint64(len(boot.listeners)),
		},
		connTable: connTable{
			clients: make(map[netip.Addr]*client),
			keys:    boot.keys,
			penalties: limits.NewPenaltyBox(boot.cfg.Limits.DeathPenaltyThreshold,
				boot.cfg.Limits.DeathPenaltyDuration, boot.cfg.Limits.DeathPenaltyMaxClients),
		},
		workerSet: workerSet{
			spec:  boot.spec,
			pool:  boot.cfg.Workers.Pool(),
			share: boot.cfg.Workers.Share(),
		},
		broker: broker{
			limiter: limits.NewLimiter(boot.cfg.RateLimitEntries),
			storeLink: storeLink{
				ratePending: cluster.NewPending[pendingRate](0),
				storeSince:  time.Now(),
			},
		},
		c: counters{
			refused: make(map[string]uint64),
			deaths:  make(map[deathCause]uint64),
		},
	}
	d.signPool = newSignPool(s)
	d.initLists(&d.conns)
	d.peekBuf = make([]byte, headend.MaxHead)
	d.canned = canned.NewReplies()
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err == nil {
		d.fdLimit = int(rl.Cur)
	}
	// The reserve keeps descriptors for worker channels, pipes, respawns and
	// the admin socket when clients hold everything else.
	d.fdReserve = 32 + 4*d.cfg.Workers.Count
	if d.upgrade.holdAccept = s.opts.HoldAccept; !d.upgrade.holdAccept {
		d.armListeners(true)
	}
	d.upstreams = upstream.New(d.log, s.post)
	d.upstreams.Configure(d.cfg.Upstreams, boot.resolved, nil, d.cfg.Workers.Count)
	if c := d.cfg.Cluster; c != nil {
		store, err := cluster.Start(c, d.log.Named("cluster"), s.post)
		if err != nil {
			return nil, err
		}
		d.store, d.ratePending = store, cluster.NewPending[pendingRate](c.StoreTimeout)
	}
	for i := 0; i < d.cfg.Workers.Count; i++ {
		d.workers = append(d.workers, d.newWorker())
	}
	return d, nil
}

// newSignPool is the loop's signing pool, whose goroutines post each
// signature back to the loop.
func newSignPool(s *Supervisor) secrets.Pool[signMsg] {
	return secrets.NewPool(func(m signMsg, rep *proto.SignReply) {
		m.rep = rep
		s.post(m)
	})
}

// run is the loop. It locks its OS thread: waiting for readiness blocks it.
func (d *dispatcher) run() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer d.p.Close()

	now := d.s.now()
	d.rotateTickets(now)
	for _, w := range d.workers {
		d.startWorker(w, now)
	}
	d.nextPing = now.Add(pingInterval)
	d.summary.since = now
	d.fdBase = countOpenFDs()
	d.log.Info("serving", "listeners", len(d.listeners), "workers", len(d.workers), "pool", d.pool, "share", d.share, "worker_threads", d.cfg.Workers.ThreadsFor(runtime.GOMAXPROCS(0)))

	for {
		d.flushSends()
		n, err := d.p.Wait(d.events, d.nextTimeout(d.s.now()))
		if err != nil {
			return err
		}
		now = d.s.now()
		for _, ev := range d.events[:n] {
			if ev.Token == poll.WakeToken {
				d.drainWake(now)
				continue
			}
			id := ev.Token & idMask
			switch ev.Token >> kindShift {
			case kindListener:
				d.accept(id, now)
			case kindWorker:
				d.workerEvent(id, ev, now)
			case kindConn:
				if c := d.conns.get(id); c != nil {
					d.connEvent(c, ev, now)
				}
			}
		}
		d.expire(now)
		d.retrySends(now)
		if t := d.ticketDeadline(); !t.IsZero() && !now.Before(t) {
			d.rotateTickets(now)
		}
		d.tick(now)
		d.signalPressure()
		if d.stopping && d.finished(now) {
			d.teardown()
			return nil
		}
	}
}

// nextTimeout is the wait's timeout: until the earliest deadline the loop
// enforces itself, so each of them bounds the wait.
func (d *dispatcher) nextTimeout(now time.Time) time.Duration {
	next := d.nextPing
	consider := func(t time.Time) {
		if !t.IsZero() && t.Before(next) {
			next = t
		}
	}
	for id := firstTimer; id <= lastTimer; id++ {
		if c := d.lists[id].first(); c != nil {
			consider(timerTable[id].deadline(d, c))
		}
	}
	if d.stress || !d.pressureSince.IsZero() {
		// Stress mode starts and ends on time, not on the next event.
		consider(now.Add(time.Second))
	}
	consider(d.acceptPause)
	consider(d.upstreams.Deadline())
	consider(d.ticketDeadline())
	consider(d.ratePending.Deadline())
	consider(d.keeperDeadline())
	consider(d.upgradeDeadline())
	for _, w := range d.workers {
		consider(w.sendRetryAt)
		if w.state == workerDead && w.exited {
			consider(w.retryAt)
		}
		if d.overstaysDrain(w) {
			consider(w.drainDeadline)
		}
	}
	if d.stopping {
		consider(d.stopDeadline)
	}
	return max(0, next.Sub(now))
}

// drainWake handles the messages queued when it starts. One posted meanwhile
// waits for the next iteration (its Wake ends that wait at once), so a
// stream of messages cannot hold the loop away from its timers, and every
// message sees a clock read after it was posted, or at most one iteration
// older.
func (d *dispatcher) drainWake(now time.Time) {
	for n := len(d.s.msgs); n > 0; n-- {
		d.message(<-d.s.msgs, now)
	}
}

func (d *dispatcher) message(m any, now time.Time) {
	switch m := m.(type) {
	case spawn.Started:
		d.spawned(m, now)
	case spawn.Exited:
		d.exited(m, now)
	case stopMsg:
		d.stop(now)
	case reloadMsg:
		d.reload(m, now)
	case upstream.DialResult:
		d.upstreams.Dialed(m, now)
	case upstream.HealthResult:
		d.upstreams.HealthChecked(m, now)
	case upstream.ResolveResult:
		d.upstreams.Reresolved(m, now)
	case logLevelMsg:
		d.logLevel = m.level
		for _, w := range d.workers {
			d.send(w, &proto.Frame{Body: &proto.Frame_LogLevel{LogLevel: &proto.LogLevel{Level: m.level}}}, -1)
		}
	case signMsg:
		d.signed(m)
	case snapshotReq:
		m.reply <- d.snapshot(now)
	case loopFunc:
		m(d)
	case statsRendered:
		d.statsDone(m)
	case cluster.RateResult:
		d.rateStored(m)
	case cluster.Penalty:
		d.penaltyShared(m, now)
	case cluster.State:
		d.storeState(m, now)
	case cluster.TicketKeys:
		d.sharedTickets(m, now)
	default:
		d.upgradeMessage(m, now)
	}
}

// timerTable gives each timer list (firstTimer..lastTimer) the deadline of
// a connection on it and what its expiry does; an expiry takes the
// connection off the list.
var timerTable = [lastTimer + 1]struct {
	deadline func(d *dispatcher, c *conn) time.Time
	expire   func(d *dispatcher, c *conn, now time.Time)
}{
	listFreshTimers: {(*dispatcher).freshDeadline, func(d *dispatcher, c *conn, now time.Time) {
		// A connection that never sent a byte is closed silently:
		// browsers and load balancers open speculative connections.
		d.c.timeoutFirstByte++
		d.closeConn(c)
	}},
	listIdleTimers: {timerDeadline, func(d *dispatcher, c *conn, now time.Time) {
		d.c.timeoutIdle++
		d.closeConn(c)
	}},
	listWaitTimers: {timerDeadline, (*dispatcher).noWorker},
	listLingerTimers: {timerDeadline, func(d *dispatcher, c *conn, now time.Time) {
		d.closeConn(c)
	}},
	listBodyWaitTimers: {timerDeadline, func(d *dispatcher, c *conn, now time.Time) {
		// The worker answers 503.
		d.bodyNoSlot++
		d.setRound(c, roundSpent, 0)
	}},
	listGapTimers: {gapDeadline, func(d *dispatcher, c *conn, now time.Time) {
		d.timeoutGap++
		d.timeout408(c, now)
	}},
	listHeadTimers: {(*dispatcher).headDeadline, func(d *dispatcher, c *conn, now time.Time) {
		d.timeoutHead++
		d.timeout408(c, now)
	}},
}

// timerDeadline is the deadline of a list whose connections carry theirs.
func timerDeadline(_ *dispatcher, c *conn) time.Time { return c.deadline.time() }

// expire enforces the per-state timeouts, each list oldest first.
func (d *dispatcher) expire(now time.Time) {
	for id := firstTimer; id <= lastTimer; id++ {
		l, t := &d.lists[id], &timerTable[id]
		// Each expiry takes the first connection off l, so this ends.
		for c := l.first(); c != nil && !now.Before(t.deadline(d, c)); c = l.first() {
			t.expire(d, c, now)
		}
	}
	d.ratePending.Expire(now, d.rateUnanswered)
	if t := d.keeperDeadline(); !t.IsZero() && !now.Before(t) {
		// A connection waited its keeperWait while a worker is free.
		d.pump(nil, now)
	}
}

// noWorker answers a connection that waited no_worker_timeout for a worker:
// a canned 503, then linger (docs/DESIGN.md §2.9).
func (d *dispatcher) noWorker(c *conn, now time.Time) {
	d.c.timeoutNoWorker++
	if c.tls {
		// No plaintext into a TLS stream.
		d.closeConn(c)
		return
	}
	sysio.Send(c.fd, d.canned.NoWorker.At(now))
	unix.Shutdown(c.fd, unix.SHUT_WR)
	d.linger(c, now)
}

// overstaysDrain reports whether w was drained while the supervisor keeps
// running and is still alive, so that it is killed at its drain deadline.
func (d *dispatcher) overstaysDrain(w *workerProc) bool {
	return !d.stopping && w.drainAsked && !w.exited && w.proc != nil && !w.drainDeadline.IsZero()
}

// tick runs the periodic work: accept resumption, pings, respawns, dials
// waiting past their bound.
func (d *dispatcher) tick(now time.Time) {
	d.updateStress(now)
	d.upgradeTick(now)
	d.upstreams.Expire(now)
	if !d.acceptPause.IsZero() && !now.Before(d.acceptPause) {
		d.acceptPause = time.Time{}
		if !d.stopping && !d.acceptHeld() {
			d.armListeners(true)
		}
	}
	for _, w := range d.workers {
		switch {
		case w.state == workerDead && w.exited && !d.stopping && !now.Before(w.retryAt):
			d.startWorker(w, now)
		case d.overstaysDrain(w) && !now.Before(w.drainDeadline) && d.keepsConns(w):
			// A retired worker serves the TLS connections it keeps until
			// each ends (at the latest at the idle timeout, or its age
			// and request bounds); the grace counts from the last.
			w.drainDeadline = now.Add(d.cfg.Limits.ShutdownGrace)
		case d.overstaysDrain(w) && !now.Before(w.drainDeadline):
			w.drainDeadline = time.Time{}
			d.killWorker(w, "did not exit within shutdown_grace after Drain")
		}
	}
	if now.Before(d.nextPing) {
		return
	}
	d.summarize(now, false)
	d.nextPing = now.Add(pingInterval)
	for _, w := range d.workers {
		if w.ch == nil || w.state == workerDead {
			continue
		}
		if now.Sub(w.lastPong) > pingTimeout {
			w.killedFor = DeathPing
			d.killWorker(w, "did not answer a ping within 10s")
			continue
		}
		w.pingSeq++
		d.send(w, &proto.Frame{Body: &proto.Frame_Ping{Ping: &proto.Ping{Seq: w.pingSeq}}}, -1)
	}
}

// stop begins the bounded shutdown (docs/DESIGN.md §2.11): stop accepting, close
// every parked connection at once, ask workers to finish and exit.
func (d *dispatcher) stop(now time.Time) {
	if d.stopping {
		return
	}
	d.stopping = true
	d.stopDeadline = now.Add(d.cfg.Limits.ShutdownGrace)
	d.summarize(now, true)
	d.log.Info("shutting down", append([]any{"grace", d.cfg.Limits.ShutdownGrace}, d.inFlight()...)...)
	d.armListeners(false)
	d.upstreams.Stop()
	for _, l := range d.listeners {
		unix.Close(l.fd)
	}
	d.listeners = nil
	for c := range d.conns.all() {
		if c.state != stateAtWorker {
			d.closeConn(c)
		}
	}
	for _, w := range d.workers {
		if w.ch != nil {
			w.state = workerDraining
			w.drainAsked = true
			d.send(w, &proto.Frame{Body: &proto.Frame_Drain{Drain: &proto.Drain{}}}, -1)
		}
	}
}

// finished reports whether shutdown is complete; past the grace period it
// kills what is left and waits only for the kills to be reaped.
func (d *dispatcher) finished(now time.Time) bool {
	all := true
	for _, w := range d.workers {
		if !w.exited {
			all = false
		}
	}
	if all {
		return true
	}
	if !now.Before(d.stopDeadline) {
		for _, w := range d.workers {
			if !w.exited && w.proc != nil {
				w.killedFor = killedAtShutdown
				w.proc.Kill()
			}
		}
		// The kills are reaped within moments; give them a short bound so a
		// stuck reap cannot hold shutdown forever.
		if now.Sub(d.stopDeadline) > 5*time.Second {
			return true
		}
	}
	return false
}

func (d *dispatcher) teardown() {
	for c := range d.conns.all() {
		d.closeConn(c)
	}
	for _, w := range d.workers {
		d.upstreams.Gone(d.up(w), time.Now())
		if w.ch != nil {
			d.del(w.ch.FD())
			w.ch.Close()
			w.ch = nil
		}
	}
	if d.store != nil {
		d.store.Close()
	}
	d.log.Info("stopped")
}

// countOpenFDs counts this process's descriptors, for the reserve arithmetic.
func countOpenFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 64
	}
	return len(ents)
}

// connEvent handles readiness of a parked or lingering connection. The
// registration is one-shot, so it stays quiet until re-armed.
func (d *dispatcher) connEvent(c *conn, ev poll.Event, now time.Time) {
	switch c.state {
	case stateLinger:
		d.discard(c)
		return
	case stateProxy:
		d.readProxy(c, now)
		return
	case stateFresh, stateIdle, stateHead:
	default:
		return
	}
	if ev.HangUp {
		// The peer closed or reset. If nothing is left to read, close here
		// rather than spend a worker round on it.
		var b [1]byte
		n, err := sysio.Recv(c.fd, b[:], unix.MSG_PEEK)
		if n <= 0 && err != unix.EAGAIN {
			d.c.peerClosed++
			d.logLimited(hclog.Debug, "peer-closed", "client closed a connection before a request")
			d.closeConn(c)
			return
		}
	}
	d.readHead(c, now)
}
