package supervisor

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/internal/poll"
	"github.com/gatehouse-dev/gatehouse/supervisor/logrelay"
	"github.com/gatehouse-dev/gatehouse/supervisor/secrets"
	"github.com/gatehouse-dev/gatehouse/supervisor/spawn"
	"golang.org/x/sys/unix"
	gproto "google.golang.org/protobuf/proto"
)

const (
	pingInterval = 5 * time.Second
	pingTimeout  = 10 * time.Second
	// Worker respawn backoff: 100 ms doubling to 10 s, reset after a minute healthy.
	backoffMin    = 100 * time.Millisecond
	backoffMax    = 10 * time.Second
	healthyUptime = time.Minute
	// throttleDelay holds back a worker that died before it was ever handed
	// a connection.
	throttleDelay = time.Minute
)

// newWorker makes a slot for a worker of the current spec, not yet started.
func (d *dispatcher) newWorker() *workerProc {
	w := &workerProc{slot: d.nextSlot, spec: d.spec, state: workerDead, exited: true}
	d.nextSlot++
	return w
}

// startWorker launches a process for slot w on its own goroutine.
func (d *dispatcher) startWorker(w *workerProc, now time.Time) {
	w.gen++
	w.state = workerStarting
	w.exited = false
	w.started = now
	w.rounds = 0
	w.slots = ipc.NewInFlight(w.spec.cfg.Limits.IPCMaxInFlightRequests)
	w.signing = 0
	w.killedFor = ""
	w.drainAsked = false
	w.drainDeadline = time.Time{}
	w.reportedReady = false
	w.handed = false
	go d.s.spawn(w.slot, w.gen, w.spec)
}

func (d *dispatcher) workerFor(slot int, gen uint64) *workerProc {
	for _, w := range d.workers {
		if w.slot == slot {
			if w.gen != gen {
				return nil
			}
			return w
		}
	}
	return nil
}

// spawned attaches a started process's channel, or schedules a retry.
func (d *dispatcher) spawned(m spawn.Started, now time.Time) {
	w := d.workerFor(m.Slot, m.Gen)
	if w == nil {
		if m.Ch != nil {
			m.Ch.Close()
			m.Proc.Kill()
		}
		return
	}
	if m.Err != nil {
		d.log.Error("starting worker", "worker", w.slot, "error", m.Err)
		w.exited = true
		d.scheduleRespawn(w, now)
		return
	}
	w.ch, w.proc, w.pid = m.Ch, m.Proc, m.PID
	w.lastPong = now
	if err := d.add(w.ch.FD(), kindWorker, w.token(), poll.In); err != nil {
		d.killWorker(w, err.Error())
		return
	}
	if d.stopping {
		w.killedFor = killedAtShutdown
		d.workerGone(w, "shutting down", true)
		return
	}
	cfg := w.spec.cfg
	w.keys = d.keys
	d.send(w, helloFrame(w.slot, cfg, w.keys, d.tickets.keys), -1)
	if cfg.Log.AccessLog {
		d.sendAccessLog(w)
	}
	if d.pressure {
		d.sendPressure(w, true)
	}
	if d.logLevel != "" {
		d.send(w, &proto.Frame{Body: &proto.Frame_LogLevel{LogLevel: &proto.LogLevel{Level: d.logLevel}}}, -1)
	}
}

// exited records a reaped worker process.
func (d *dispatcher) exited(m spawn.Exited, now time.Time) {
	w := d.workerFor(m.Slot, m.Gen)
	if w == nil {
		return
	}
	w.exited = true
	w.proc = nil
	// A drained worker's state may already be dead: its channel closes
	// before it is reaped.
	switch {
	case (d.stopping || w.drainAsked) && m.Signal == 0 && m.Code == 0:
		d.log.Info("worker exited", "worker", w.slot, "pid", w.pid)
	case w.killedFor == killedAtShutdown:
		d.log.Info("worker stopped at shutdown", "worker", w.slot, "pid", w.pid, "status", m.Status)
	default:
		reason := deathReason(m, w.killedFor)
		d.c.workerDeaths++
		d.c.deaths[deathCause{reason, m.Signal}]++
		d.log.Error("worker died", "worker", w.slot, "pid", w.pid, "reason", reason, "status", m.Status)
	}
	d.workerGone(w, m.Status, false)
	if w.retiring && !d.stopping {
		d.workers = slices.DeleteFunc(d.workers, func(x *workerProc) bool { return x == w })
		d.roll(now)
	}
}

// killWorker ends a worker for a protocol violation or unresponsiveness
// (w.killedFor, when set before, says which other).
func (d *dispatcher) killWorker(w *workerProc, reason string) {
	if w.killedFor == "" {
		w.killedFor = DeathProtocol
	}
	d.c.workerKills++
	d.log.Error("killing worker", "worker", w.slot, "pid", w.pid, "reason", reason)
	d.workerGone(w, reason, true)
}

// workerGone detaches a worker: its channel is closed, every connection it
// held is closed and its slots released (docs/DESIGN.md §2.10); it is respawned with
// backoff once reaped.
func (d *dispatcher) workerGone(w *workerProc, reason string, kill bool) {
	now := d.s.now()
	if kill && w.proc != nil {
		w.proc.Kill()
	}
	if w.state != workerDead {
		d.scheduleRespawn(w, now)
	}
	if w.ch != nil {
		d.del(w.ch.FD())
		w.ch.Close()
		w.ch = nil
		dropOut(w)
		d.upstreams.Gone(d.up(w), now)
		var held []lostConn
		w.kept = 0
		for c := range d.conns.all() {
			if c.kept == w {
				// Its copy died with w; the supervisor's serves on,
				// unless w held its TLS state.
				c.kept = nil
				if c.tls {
					w.tls--
					d.closeConn(c)
				}
				continue
			}
			if c.worker == w {
				cl := c.client
				held = append(held, lostConn{client: cl.key, trusted: cl.trusted, listener: uint64(c.listener)})
				d.closeConn(c)
				d.pump(cl, now)
			}
		}
		if len(held) > 0 && !d.stopping {
			d.connsLost(w, reason, held, now)
		}
	}
	d.pump(nil, now)
}

func (d *dispatcher) scheduleRespawn(w *workerProc, now time.Time) {
	w.state = workerDead
	if d.stopping || w.retiring {
		return
	}
	switch {
	case !w.handed:
		// Died before it was handed a connection: a broken build or
		// configuration, which respawning quickly cannot fix (Postfix
		// throttles such a service the same way). One killed by what a
		// connection brought gets the normal backoff: otherwise a few
		// requests would hold every slot for a minute.
		w.backoff = throttleDelay
	case w.backoff == 0 || now.Sub(w.started) >= healthyUptime:
		w.backoff = backoffMin
	default:
		w.backoff = min(2*w.backoff, backoffMax)
	}
	w.restarts++
	w.retryAt = now.Add(w.backoff)
}

// roll moves the worker set toward the configuration: one new worker
// starting at a time while fewer than workers.count are live, and retiring
// workers kept serving only while they stand in for replacements that are
// not ready yet; the rest drain, finish their rounds and exit.
func (d *dispatcher) roll(now time.Time) {
	if d.stopping {
		return
	}
	target := d.cfg.Workers.Count
	live, starting, ready := 0, 0, 0
	var retiring []*workerProc
	for _, w := range d.workers {
		switch {
		case w.retiring:
			if w.state == workerReady || w.state == workerStarting {
				retiring = append(retiring, w)
			}
		default:
			live++
			switch w.state {
			case workerStarting:
				starting++
			case workerReady:
				ready++
			}
		}
	}
	for i, w := range retiring {
		if i < target-ready && w.state == workerReady {
			continue // still standing in
		}
		d.drainWorker(w)
	}
	if starting == 0 && live < target {
		w := d.newWorker()
		d.workers = append(d.workers, w)
		d.startWorker(w, now)
	}
}

// drainWorker stops dispatching new connections to w and asks it to finish
// and exit. Retired, it keeps serving the TLS connections whose state it
// holds until each ends (docs/DESIGN.md §2.10), so a reload drops none.
func (d *dispatcher) drainWorker(w *workerProc) {
	if w.ch == nil {
		return
	}
	w.state = workerDraining
	w.drainAsked = true
	w.drainDeadline = time.Now().Add(d.cfg.Limits.ShutdownGrace)
	d.send(w, &proto.Frame{Body: &proto.Frame_Drain{Drain: &proto.Drain{Retire: true}}}, -1)
}

// keepsConns reports whether some connection's TLS state is kept by w
// (plain connections move to other workers).
func (d *dispatcher) keepsConns(w *workerProc) bool {
	for c := range d.conns.all() {
		if c.kept == w && c.tls {
			return true
		}
	}
	return false
}

// checkReady closes the Ready channel once every worker is ready.
func (d *dispatcher) checkReady() {
	for _, w := range d.workers {
		if w.state != workerReady && !w.retiring {
			return
		}
	}
	d.s.once.Do(func() { close(d.s.ready) })
}

func layerSummary(layers []*proto.SandboxLayer) string {
	s := ""
	for i, l := range layers {
		if i > 0 {
			s += ","
		}
		mark := "+"
		if !l.GetApplied() {
			mark = "-"
		}
		s += mark + l.GetName()
	}
	return s
}

// helloFrame is the Hello a worker in slot gets: everything it serves from.
func helloFrame(slot int, cfg *config.Config, keys *secrets.Ring, tickets [][]byte) *proto.Frame {
	return &proto.Frame{Body: &proto.Frame_Hello{Hello: &proto.Hello{
		WorkerId:     uint32(slot),
		Config:       cfg.Source,
		ConfigName:   cfg.Filename,
		Concurrency:  uint32(cfg.Workers.Concurrency),
		Threads:      uint32(cfg.Workers.ThreadsFor(runtime.GOMAXPROCS(0))),
		BaseDir:      cfg.BaseDir,
		Certificates: keys.Hello(),
		TicketKeys:   tickets,
		Htpasswd:     secrets.Htpasswd(cfg),
	}}}
}

// ErrHelloTooLarge is returned by New, and fails a reload, when the
// configuration, its certificate chains and htpasswd entries do not fit in
// the one frame that hands them to a worker: every worker would be refused
// its start.
var ErrHelloTooLarge = errors.New("supervisor: the configuration does not fit in a worker's Hello")

// checkHello refuses a configuration whose Hello would not fit in a frame,
// counting two full-size session ticket keys and the largest slot number.
func checkHello(cfg *config.Config, keys *secrets.Ring) error {
	tickets := [][]byte{make([]byte, 32), make([]byte, 32)}
	f := helloFrame(1<<16, cfg, keys, tickets)
	if n := gproto.Size(f); n > ipc.MaxFrameSize {
		return fmt.Errorf("%w: the configuration file (%d bytes), its certificate chains and htpasswd entries make %d bytes, over the %d a frame holds; "+
			"shorten the file, the chains or the htpasswd files", ErrHelloTooLarge, len(cfg.Source), n, ipc.MaxFrameSize)
	}
	return nil
}

// sendAccessLog gives a worker the write end of a pipe for its access lines,
// and starts the relay that copies them out. A worker whose access log is on
// needs it before its first Dispatch: one that cannot be given it is stopped.
func (d *dispatcher) sendAccessLog(w *workerProc) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		d.killWorker(w, fmt.Sprintf("creating its access log pipe: %v", err))
		return
	}
	// The read end under the runtime's poller: a relay waiting for lines
	// holds no thread. The worker's end stays blocking, as a file is.
	if err := unix.SetNonblock(p[0], true); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		d.killWorker(w, fmt.Sprintf("creating its access log pipe: %v", err))
		return
	}
	format := logrelay.FormatOf(w.spec.cfg.Log.AccessLogFormat)
	d.s.accessRelays.Add(1)
	go func() {
		defer d.s.accessRelays.Done()
		r := os.NewFile(uintptr(p[0]), "access log pipe")
		d.s.access.Relay(r, w.slot, format)
		r.Close()
	}()
	d.sendOwned(w, &proto.Frame{Body: &proto.Frame_AccessLog{AccessLog: &proto.AccessLog{}}}, p[1])
}

// ready handles a worker's Ready (frameTable has checked it). A worker asked
// to drain while it was starting still reports Ready once, and then exits.
func (d *dispatcher) ready(w *workerProc, m *proto.Ready, now time.Time) {
	layers, _ := readyLayers(m.GetLayers())
	w.reportedReady = true
	w.threads = int(m.GetThreads())
	w.layers = append(append([]*proto.SandboxLayer(nil), w.spec.layers...), layers...)
	if w.state == workerDraining {
		return
	}
	w.state = workerReady
	d.log.Info("worker ready", "worker", w.slot, "pid", w.pid, "sandbox", layerSummary(w.layers))
	d.checkReady()
	d.roll(now)
	d.pump(nil, now)
}

// Bounds on the sandbox report in a Ready frame.
const (
	maxReadyLayers = 32
	maxLayerName   = 32
	maxLayerDetail = 512
)

// readyLayers checks the sandbox layers a worker reports, which operators
// see in the log and in gatehousectl: a name is lower-case letters, digits
// and '_' (never "namespace/...", which only the supervisor reports), and a
// detail is cut and Go-quoted when it holds anything but printable ASCII. It
// returns the layers to keep, or the violation.
func readyLayers(in []*proto.SandboxLayer) ([]*proto.SandboxLayer, string) {
	if len(in) > maxReadyLayers {
		return nil, fmt.Sprintf("Ready reports %d sandbox layers", len(in))
	}
	out := make([]*proto.SandboxLayer, 0, len(in))
	for _, l := range in {
		name := l.GetName()
		if !layerName(name) {
			return nil, fmt.Sprintf("Ready reports a sandbox layer named %.40q", name)
		}
		detail := l.GetDetail()
		if len(detail) > maxLayerDetail {
			detail = detail[:maxLayerDetail]
		}
		if !logrelay.PlainText(detail) {
			detail = strconv.Quote(detail)
		}
		out = append(out, &proto.SandboxLayer{Name: name, Applied: l.GetApplied(), Detail: detail})
	}
	return out, ""
}

// layerName reports whether name may name a worker's sandbox layer.
func layerName(name string) bool {
	if name == "" || len(name) > maxLayerName || name[0] < 'a' || name[0] > 'z' {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}
