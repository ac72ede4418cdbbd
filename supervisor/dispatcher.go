package supervisor

import (
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"syscall"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/internal/poll"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// Poller tokens: the kind in the top byte, an id below. Connection ids are
// never reused, so an event for a connection closed earlier in the same batch
// finds no record and is dropped.
const (
	kindListener = 2
	kindWorker   = 3
	kindConn     = 4
	kindShift    = 56
	idMask       = 1<<kindShift - 1
)

const (
	maxEvents = 256
	// acceptBatch bounds accepts per listener event so one busy listener
	// cannot starve the rest of the loop.
	acceptBatch = 64
	// frameBatch bounds frames read from one worker per event: one flooding
	// worker cannot delay another (SPEC §4).
	frameBatch = 64
	// lingerTimeout bounds how long a closed-for-writing connection's input is
	// discarded before the descriptor is closed (nginx: lingering_timeout).
	lingerTimeout = 2 * time.Second
	lingerBuf     = 16 << 10
	// acceptPause is how long accepting stops when descriptors run out and
	// no idle connection can be closed to make room.
	acceptPause  = 100 * time.Millisecond
	pingInterval = 5 * time.Second
	pingTimeout  = 10 * time.Second
	// Worker respawn backoff: 100 ms doubling to 10 s, reset after a minute healthy.
	backoffMin    = 100 * time.Millisecond
	backoffMax    = 10 * time.Second
	healthyUptime = time.Minute
	// throttleDelay holds back a worker that died before serving a request.
	throttleDelay = time.Minute
	// connInterest parks a connection: one readiness report, then quiet
	// until re-armed.
	connInterest = poll.In | poll.OneShot
)

// canned503 is written, without blocking, to a readable connection that found
// no worker for no_worker_timeout (SPEC §2 item 8).
var canned503 = []byte("HTTP/1.1 503 Service Unavailable\r\n" +
	"Content-Type: text/plain; charset=utf-8\r\n" +
	"Content-Length: 20\r\n" +
	"Retry-After: 5\r\n" +
	"Connection: close\r\n" +
	"X-Content-Type-Options: nosniff\r\n" +
	"\r\n" +
	"no worker available\n")

// dispatcher is the loop's state. Every field is owned by the loop goroutine.
type dispatcher struct {
	s   *Supervisor
	cfg *config.Config
	log hclog.Logger

	p            *poll.Poller
	listeners    []listener
	nextListener uint64
	events       []poll.Event

	conns    map[uint64]*conn
	nextID   uint64
	spec     *workerSpec // what new workers are started with
	nextSlot int

	upstreams map[string]*upstreamState
	limiter   *limiter
	// logLevel is the level set at run time ("" until then), which new
	// workers get after Hello.
	logLevel string
	clients  map[netip.Addr]*client
	workers  []*workerProc
	pool     int
	share    int

	out     int // connections at workers
	queued  int // connections that have not finished a first request
	idle    int // parked keep-alive connections
	waiting connList

	freshTimers  connList
	idleTimers   connList
	waitTimers   connList
	lingerTimers connList

	fdLimit     int
	fdReserve   int
	fdBase      int
	acceptPause time.Time // accepting is paused until then
	acceptArmed bool

	nextPing     time.Time
	stopping     bool
	stopDeadline time.Time
	scratch      []byte

	logLimit map[string]time.Time
	c        counters
}

func newDispatcher(s *Supervisor) (*dispatcher, error) {
	d := &dispatcher{
		s:            s,
		cfg:          s.cfg,
		log:          s.log.Named("dispatcher"),
		p:            s.poller,
		listeners:    s.listeners,
		nextListener: uint64(len(s.listeners)),
		events:       make([]poll.Event, maxEvents),
		conns:        make(map[uint64]*conn),
		clients:      make(map[netip.Addr]*client),
		pool:         s.cfg.Workers.Pool(),
		share:        s.cfg.Workers.Share(),
		scratch:      make([]byte, lingerBuf),
		logLimit:     make(map[string]time.Time),
		c: counters{
			refused:              make(map[string]uint64),
			workerDeathsBySignal: make(map[syscall.Signal]uint64),
		},
	}
	d.waiting.wait = true
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err == nil {
		d.fdLimit = int(rl.Cur)
	}
	// The reserve keeps descriptors for worker channels, pipes, respawns and
	// the admin socket when clients hold everything else.
	d.fdReserve = 32 + 4*s.cfg.Workers.Count
	d.armListeners(true)
	d.spec = s.spec
	d.limiter = newLimiter(s.cfg.RateLimitEntries)
	d.upstreams = make(map[string]*upstreamState)
	d.setUpstreams()
	for i := 0; i < s.cfg.Workers.Count; i++ {
		d.workers = append(d.workers, d.newWorker())
	}
	return d, nil
}

func token(kind int, id uint64) uint64 { return uint64(kind)<<kindShift | id&idMask }

func (d *dispatcher) add(fd, kind int, id uint64, in poll.Interest) error {
	return d.p.Add(fd, token(kind, id), in)
}

func (d *dispatcher) mod(fd, kind int, id uint64, in poll.Interest) error {
	return d.p.Mod(fd, token(kind, id), in)
}

// del deregisters fd; it must precede closing it, since a registration
// outliving its descriptor stays stale while a worker holds a duplicate.
func (d *dispatcher) del(fd int) {
	d.p.Del(fd)
}

// armListeners adds or removes every listener from the poller.
func (d *dispatcher) armListeners(on bool) {
	if on == d.acceptArmed {
		return
	}
	for _, l := range d.listeners {
		if on {
			if err := d.add(l.fd, kindListener, l.id, poll.In); err != nil {
				d.log.Error("arming listener", "listener", l.name, "error", err)
			}
		} else {
			d.del(l.fd)
		}
	}
	d.acceptArmed = on
}

// run is the loop. It locks its OS thread: waiting for readiness blocks it.
func (d *dispatcher) run() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer d.p.Close()

	now := time.Now()
	for _, w := range d.workers {
		d.startWorker(w, now)
	}
	d.nextPing = now.Add(pingInterval)
	d.fdBase = countOpenFDs()
	d.log.Info("serving", "listeners", len(d.listeners), "workers", len(d.workers), "pool", d.pool, "share", d.share)

	for {
		n, err := d.p.Wait(d.events, d.nextTimeout(time.Now()))
		if err != nil {
			return err
		}
		now = time.Now()
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
				if c := d.conns[id]; c != nil {
					d.connEvent(c, ev, now)
				}
			}
		}
		d.expire(now)
		d.tick(now)
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
	for _, l := range []*connList{&d.freshTimers, &d.idleTimers, &d.waitTimers, &d.lingerTimers} {
		if l.head != nil {
			consider(l.head.deadline)
		}
	}
	consider(d.acceptPause)
	for _, w := range d.workers {
		if w.state == workerDead && w.exited {
			consider(w.retryAt)
		}
	}
	if d.stopping {
		consider(d.stopDeadline)
	}
	return max(0, next.Sub(now))
}

func (d *dispatcher) drainWake(now time.Time) {
	for {
		select {
		case m := <-d.s.msgs:
			d.message(m, now)
		default:
			return
		}
	}
}

func (d *dispatcher) message(m any, now time.Time) {
	switch m := m.(type) {
	case spawnResult:
		d.spawned(m, now)
	case exitResult:
		d.exited(m, now)
	case stopMsg:
		d.stop(now)
	case reloadMsg:
		d.reload(m, now)
	case dialResult:
		d.dialed(m)
	case logLevelMsg:
		d.logLevel = m.level
		for _, w := range d.workers {
			d.send(w, &proto.Frame{Body: &proto.Frame_LogLevel{LogLevel: &proto.LogLevel{Level: m.level}}}, -1)
		}
	case snapshotReq:
		m.reply <- d.snapshot(now)
	}
}

// accept takes new connections from listener i and admits them before a byte
// is read (SPEC §2 item 1).
func (d *dispatcher) accept(id uint64, now time.Time) {
	i := slices.IndexFunc(d.listeners, func(l listener) bool { return l.id == id })
	if d.stopping || i < 0 {
		return
	}
	l := d.listeners[i]
	for n := 0; n < acceptBatch; n++ {
		if d.fdLimit > 0 && d.fdBase+len(d.conns)+d.fdReserve >= d.fdLimit && !d.evictIdle("descriptor reserve") {
			d.pauseAccept(now, "descriptor reserve reached and no idle connection to close")
			return
		}
		fd, sa, err := accept(l.fd)
		switch err {
		case nil:
		case unix.EAGAIN:
			return
		case unix.EINTR, unix.ECONNABORTED, unix.EPROTO:
			continue
		case unix.EMFILE, unix.ENFILE, unix.ENOBUFS, unix.ENOMEM:
			// Out of descriptors: make room from the idle keep-alive
			// connections, oldest first, as nginx does; never spin.
			d.c.acceptErrors++
			if !d.evictIdle("descriptors exhausted") {
				d.pauseAccept(now, err.Error())
				return
			}
			continue
		default:
			d.c.acceptErrors++
			d.logLimited("accept", "accept failed", "listener", l.name, "error", err)
			return
		}
		d.admit(fd, l.id, sockaddrAddrPort(sa), now)
	}
}

func (d *dispatcher) pauseAccept(now time.Time, why string) {
	d.c.acceptPauses++
	d.acceptPause = now.Add(acceptPause)
	d.armListeners(false)
	d.logLimited("accept-pause", "accepting paused", "reason", why, "for", acceptPause)
}

// admit applies the admission caps to an accepted descriptor and parks it.
func (d *dispatcher) admit(fd int, listener uint64, peer netip.AddrPort, now time.Time) {
	key := clientKey(peer.Addr(), d.cfg.IPv6ClientPrefixLength)
	cl := d.clients[key]
	if cl == nil {
		cl = &client{key: key, trusted: d.trusted(peer.Addr())}
		cl.waiting.wait = true
	}
	refuse := ""
	switch {
	case !cl.trusted && cl.conns >= d.cfg.Limits.MaxConnectionsPerClient:
		refuse = refusedPerClient
	case d.cfg.Limits.MaxQueuedConnections > 0 && d.queued >= d.cfg.Limits.MaxQueuedConnections:
		refuse = refusedQueued
	}
	if refuse != "" {
		unix.Close(fd)
		d.c.refused[refuse]++
		// The address stays out of the log line (SPEC §2 item 1).
		d.logLimited("refused-"+refuse, "connection refused", "reason", refuse)
		return
	}
	d.nextID++
	c := &conn{id: d.nextID, fd: fd, client: cl, listener: listener, peer: peer, accepted: now, fresh: true}
	if err := d.add(fd, kindConn, c.id, connInterest); err != nil {
		unix.Close(fd)
		d.logLimited("epoll-add", "registering connection", "error", err)
		return
	}
	d.clients[key] = cl
	cl.conns++
	d.conns[c.id] = c
	d.queued++
	d.c.accepted++
	c.deadline = now.Add(d.cfg.Limits.FirstByteTimeout)
	d.freshTimers.push(c)
}

func (d *dispatcher) trusted(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range d.cfg.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// connEvent handles readiness of a parked or lingering connection. The
// registration is one-shot, so it stays quiet until re-armed.
func (d *dispatcher) connEvent(c *conn, ev poll.Event, now time.Time) {
	switch c.state {
	case stateLinger:
		d.discard(c)
		return
	case stateFresh, stateIdle:
	default:
		return
	}
	if ev.HangUp {
		// The peer closed or reset. If nothing is left to read, close here
		// rather than spend a worker round on it.
		var b [1]byte
		n, _, err := unix.Recvfrom(c.fd, b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		if n <= 0 && err != unix.EAGAIN {
			d.c.peerClosed++
			d.logLimited("peer-closed", "client closed a connection before a request")
			d.closeConn(c)
			return
		}
	}
	d.leavePark(c)
	d.tryDispatch(c, now)
}

// leavePark takes a parked connection off its timer list and counters.
func (d *dispatcher) leavePark(c *conn) {
	if c.tlist != nil {
		c.tlist.remove(c)
	}
	if c.state == stateIdle {
		d.idle--
	}
}

// discard reads and drops what a lingering connection still sends.
func (d *dispatcher) discard(c *conn) {
	for i := 0; i < 4; i++ {
		n, err := unix.Read(c.fd, d.scratch)
		if err == unix.EAGAIN {
			d.arm(c)
			return
		}
		if n <= 0 || err != nil {
			d.closeConn(c)
			return
		}
	}
	d.arm(c)
}

func (d *dispatcher) arm(c *conn) {
	if err := d.mod(c.fd, kindConn, c.id, connInterest); err != nil {
		d.logLimited("epoll-mod", "re-arming connection", "error", err)
		d.closeConn(c)
		return
	}
}

// tryDispatch hands a readable connection to a worker under both bounds: the
// client's share and the pool. Over either, it waits outside the poller,
// oldest first, and its no-worker timer runs (SPEC §2 item 4).
func (d *dispatcher) tryDispatch(c *conn, now time.Time) {
	cl := c.client
	if !cl.trusted && cl.out >= d.share {
		d.enqueue(c, &cl.waiting, now)
		cl.waits++
		d.c.shareWaits++
		return
	}
	w := d.pickWorker()
	if w == nil {
		d.enqueue(c, &d.waiting, now)
		d.c.poolWaits++
		return
	}
	d.dispatch(w, c)
}

func (d *dispatcher) enqueue(c *conn, q *connList, now time.Time) {
	c.state = stateWaiting
	q.push(c)
	if c.tlist != &d.waitTimers {
		if c.tlist != nil {
			c.tlist.remove(c)
		}
		c.deadline = now.Add(d.cfg.Limits.NoWorkerTimeout)
		d.waitTimers.push(c)
	}
}

// pickWorker returns the ready worker with the most free slots, or nil.
func (d *dispatcher) pickWorker() *workerProc {
	if d.stopping || d.out >= d.pool {
		return nil
	}
	var best *workerProc
	for _, w := range d.workers {
		if w.state != workerReady || w.active >= w.spec.cfg.Workers.Concurrency {
			continue
		}
		if best == nil || w.active < best.active {
			best = w
		}
	}
	return best
}

// dispatch sends c to w. Admission is counted here, explicitly, never
// inferred from the state of a pool.
func (d *dispatcher) dispatch(w *workerProc, c *conn) {
	if c.tlist != nil {
		c.tlist.remove(c)
	}
	if c.qlist != nil {
		c.qlist.remove(c)
	}
	c.state = stateAtWorker
	c.worker = w
	w.active++
	c.client.out++
	d.out++
	d.c.dispatches++
	f := &proto.Frame{Body: &proto.Frame_Dispatch{Dispatch: &proto.Dispatch{
		ConnId:           c.id,
		HasFd:            true,
		Listener:         uint32(c.listener),
		Peer:             c.peer.String(),
		ClientKey:        c.client.key.String(),
		Carried:          c.carried,
		Requests:         c.requests,
		AcceptedUnixNano: c.accepted.UnixNano(),
	}}}
	c.carried = nil
	d.send(w, f, c.fd)
}

// send writes a frame to a worker, queueing it when the channel is full. The
// dispatcher keeps its descriptor fd (a client connection it dispatches).
func (d *dispatcher) send(w *workerProc, f *proto.Frame, fd int) { d.sendFD(w, f, fd, false) }

// sendOwned is send for a descriptor the dispatcher gives away (a dialed
// upstream): it is closed once sent, or when the worker is gone.
func (d *dispatcher) sendOwned(w *workerProc, f *proto.Frame, fd int) { d.sendFD(w, f, fd, true) }

// sendFD writes f, or queues it while the channel is full. While anything is
// queued the dispatcher stops reading the worker's frames (its interest is
// writable only): a worker that does not read its replies cannot make the
// dispatcher buffer more, so the queue stays bounded by what one batch of
// frames can produce, and the in-flight cap.
func (d *dispatcher) sendFD(w *workerProc, f *proto.Frame, fd int, owned bool) {
	if w.ch == nil {
		if owned {
			unix.Close(fd)
		}
		return
	}
	if len(w.outq) == 0 {
		err := w.ch.Send(f, fd)
		if err == nil {
			if owned {
				unix.Close(fd)
			}
			return
		}
		if err != ipc.ErrWouldBlock {
			if owned {
				unix.Close(fd)
			}
			d.workerGone(w, fmt.Sprintf("sending to worker: %v", err), true)
			return
		}
	}
	w.outq = append(w.outq, outFrame{f: f, fd: fd, owned: owned})
	if !w.wantOut {
		w.wantOut = true
		d.mod(w.ch.FD(), kindWorker, w.token(), poll.Out)
	}
}

func (d *dispatcher) flushOut(w *workerProc) {
	for len(w.outq) > 0 {
		o := w.outq[0]
		err := w.ch.Send(o.f, o.fd)
		if err == ipc.ErrWouldBlock {
			return
		}
		if o.owned {
			unix.Close(o.fd)
		}
		w.outq[0] = outFrame{}
		w.outq = w.outq[1:]
		if err != nil {
			d.workerGone(w, fmt.Sprintf("sending to worker: %v", err), true)
			return
		}
	}
	w.outq = nil
	w.wantOut = false
	d.mod(w.ch.FD(), kindWorker, w.token(), poll.In)
}

// dropOut discards a gone worker's queue, closing the descriptors it owned.
func dropOut(w *workerProc) {
	for _, o := range w.outq {
		if o.owned {
			unix.Close(o.fd)
		}
	}
	w.outq = nil
	w.wantOut = false
}

// release gives back the slots a connection held at its worker.
func (d *dispatcher) release(c *conn) {
	c.worker.active--
	c.worker = nil
	c.client.out--
	d.out--
}

// pump dispatches waiting connections after slots were released: first the
// pool's queue, oldest first, then the head of the client's own queue, which
// now fits its share (it joins the pool's queue if no slot is left).
func (d *dispatcher) pump(cl *client, now time.Time) {
	for d.waiting.head != nil {
		w := d.pickWorker()
		if w == nil {
			break
		}
		c := d.waiting.pop()
		d.tryDispatch(c, now)
	}
	if cl != nil && cl.waiting.head != nil && (cl.trusted || cl.out < d.share) {
		c := cl.waiting.pop()
		d.tryDispatch(c, now)
	}
}

// park holds a kept-alive connection until its next request or its idle
// timeout. Over keep_alive_max_connections the oldest idle one is closed.
func (d *dispatcher) park(c *conn, now time.Time) {
	if d.idle >= d.cfg.Limits.KeepAliveMaxConnections {
		d.evictIdle("keep_alive_max_connections")
	}
	c.state = stateIdle
	d.idle++
	c.deadline = now.Add(d.cfg.Limits.KeepAliveIdleTimeout)
	d.idleTimers.push(c)
	d.arm(c)
}

// evictIdle closes the oldest idle kept-alive connection, if any. The
// Keep-Alive timeout hint is advisory (RFC 9112 §9.3), so this is allowed.
func (d *dispatcher) evictIdle(why string) bool {
	c := d.idleTimers.head
	if c == nil {
		return false
	}
	d.c.idleEvicted++
	d.logLimited("evict-"+why, "closing oldest idle connection", "reason", why)
	d.closeConn(c)
	return true
}

func (d *dispatcher) linger(c *conn, now time.Time) {
	c.state = stateLinger
	c.deadline = now.Add(lingerTimeout)
	d.lingerTimers.push(c)
	d.arm(c)
}

// closeConn forgets a connection and closes the dispatcher's descriptor. It
// deregisters before closing: a registration outliving its descriptor would
// be stale for good while a worker still holds a duplicate.
func (d *dispatcher) closeConn(c *conn) {
	if c.tlist != nil {
		c.tlist.remove(c)
	}
	if c.qlist != nil {
		c.qlist.remove(c)
	}
	if c.state == stateIdle {
		d.idle--
	}
	if c.worker != nil {
		d.release(c)
	}
	if c.fresh {
		d.queued--
	}
	d.del(c.fd)
	unix.Close(c.fd)
	delete(d.conns, c.id)
	cl := c.client
	cl.conns--
	if cl.conns == 0 && cl.out == 0 {
		delete(d.clients, cl.key)
	}
	d.c.closed++
}

// expire enforces the per-state timeouts.
func (d *dispatcher) expire(now time.Time) {
	for c := d.freshTimers.head; c != nil && !now.Before(c.deadline); c = d.freshTimers.head {
		// A connection that never sent a byte is closed silently: browsers
		// and load balancers open speculative connections.
		d.c.timeoutFirstByte++
		d.closeConn(c)
	}
	for c := d.idleTimers.head; c != nil && !now.Before(c.deadline); c = d.idleTimers.head {
		d.c.timeoutIdle++
		d.closeConn(c)
	}
	for c := d.waitTimers.head; c != nil && !now.Before(c.deadline); c = d.waitTimers.head {
		d.c.timeoutNoWorker++
		d.waitTimers.remove(c)
		if c.qlist != nil {
			c.qlist.remove(c)
		}
		unix.Write(c.fd, canned503)
		unix.Shutdown(c.fd, unix.SHUT_WR)
		d.linger(c, now)
	}
	for c := d.lingerTimers.head; c != nil && !now.Before(c.deadline); c = d.lingerTimers.head {
		d.closeConn(c)
	}
}

// tick runs the periodic work: accept resumption, pings, respawns.
func (d *dispatcher) tick(now time.Time) {
	if !d.acceptPause.IsZero() && !now.Before(d.acceptPause) {
		d.acceptPause = time.Time{}
		if !d.stopping {
			d.armListeners(true)
		}
	}
	for _, w := range d.workers {
		if w.state == workerDead && w.exited && !d.stopping && !now.Before(w.retryAt) {
			d.startWorker(w, now)
		}
	}
	if now.Before(d.nextPing) {
		return
	}
	d.nextPing = now.Add(pingInterval)
	for _, w := range d.workers {
		if w.ch == nil || w.state == workerDead {
			continue
		}
		if now.Sub(w.lastPong) > pingTimeout {
			d.killWorker(w, "did not answer a ping within 10s")
			continue
		}
		w.pingSeq++
		d.send(w, &proto.Frame{Body: &proto.Frame_Ping{Ping: &proto.Ping{Seq: w.pingSeq}}}, -1)
	}
}

// stop begins the bounded shutdown (SPEC §2 item 9): stop accepting, close
// every parked connection at once, ask workers to finish and exit.
func (d *dispatcher) stop(now time.Time) {
	if d.stopping {
		return
	}
	d.stopping = true
	d.stopDeadline = now.Add(d.cfg.Limits.ShutdownGrace)
	d.log.Info("shutting down", "grace", d.cfg.Limits.ShutdownGrace, "at_workers", d.out)
	d.armListeners(false)
	for _, l := range d.listeners {
		unix.Close(l.fd)
	}
	d.listeners = nil
	for _, c := range d.conns {
		if c.state != stateAtWorker {
			d.closeConn(c)
		}
	}
	for _, w := range d.workers {
		if w.ch != nil {
			w.state = workerDraining
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
	for _, c := range d.conns {
		d.closeConn(c)
	}
	for _, w := range d.workers {
		if w.ch != nil {
			d.del(w.ch.FD())
			w.ch.Close()
			w.ch = nil
		}
	}
	d.log.Info("stopped")
}

// logLimited logs at most once a second per key, so a flood of refusals or
// bad peers cannot flood the log.
func (d *dispatcher) logLimited(key, msg string, args ...any) {
	now := time.Now()
	if t, ok := d.logLimit[key]; ok && now.Sub(t) < time.Second {
		return
	}
	if len(d.logLimit) > 1024 {
		clear(d.logLimit)
	}
	d.logLimit[key] = now
	d.log.Warn(msg, args...)
}

// countOpenFDs counts this process's descriptors, for the reserve arithmetic.
func countOpenFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 64
	}
	return len(ents)
}
