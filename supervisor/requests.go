package supervisor

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/proto"
	"golang.org/x/sys/unix"
)

// Requests from workers (docs/DESIGN.md §4.2). Every request takes a slot of the
// channel's in-flight cap before it is started; over the cap it is answered
// at once with Overloaded, never queued or dropped. A slot is released
// before the reply is written, so a worker that keeps at most cap requests
// outstanding and waits for each reply is never refused
// (the admission race, docs/DESIGN.md §2.6).

// maxForwardedFor bounds the X-Forwarded-For entries the dispatcher walks.
const maxForwardedFor = 32

// upstreamState counts one upstream's connections. Owned by the loop.
type upstreamState struct {
	cfg     config.Upstream
	held    int // given to workers and not released
	dialing int
	next    int // round robin over cfg.Addresses
}

// dialResult is what a dialing goroutine posts back.
type dialResult struct {
	slot     int
	gen      uint64
	id       uint64
	upstream string
	fd       int
	err      error
}

// request handles one worker request frame. It reports false when the worker
// was killed for it.
func (d *dispatcher) request(w *workerProc, f *proto.Frame, now time.Time) bool {
	if w.state != workerReady && w.state != workerDraining {
		d.killWorker(w, "request before Ready")
		return false
	}
	if rel := f.GetUpstreamRelease(); rel != nil {
		// A notice, not a request: no slot, no reply.
		name := rel.GetUpstream()
		if w.held[name] == 0 {
			d.killWorker(w, fmt.Sprintf("releases an upstream connection to %q it does not hold", name))
			return false
		}
		w.held[name]--
		if u := d.upstreams[name]; u != nil {
			u.held--
		}
		return true
	}
	if err := d.validRequest(w, f); err != "" {
		d.killWorker(w, err)
		return false
	}
	if w.slots.TryAcquire() == ipc.ErrChannelFull {
		d.c.ipcOverloaded++
		d.send(w, &proto.Frame{Id: f.GetId(), Body: &proto.Frame_Overloaded{Overloaded: &proto.Overloaded{}}}, -1)
		return true
	}
	switch b := f.Body.(type) {
	case *proto.Frame_Dial:
		return d.dial(w, f.GetId(), b.Dial.GetUpstream())
	case *proto.Frame_RateCheck:
		return d.rateCheck(w, f.GetId(), b.RateCheck, now)
	case *proto.Frame_StatsRequest:
		w.slots.Release()
		var buf bytes.Buffer
		if err := d.snapshot(now).WritePrometheus(&buf); err != nil {
			d.log.Error("rendering metrics", "error", err)
		}
		text := buf.Bytes()
		if len(text) > statsMax {
			text = text[:statsMax]
		}
		d.send(w, &proto.Frame{Id: f.GetId(), Body: &proto.Frame_StatsReply{StatsReply: &proto.StatsReply{Text: text}}}, -1)
	}
	return true
}

// validRequest checks a request before it may take a slot: a malformed one
// kills the worker whether or not the channel is full. It returns the
// violation, or "".
func (d *dispatcher) validRequest(w *workerProc, f *proto.Frame) string {
	switch b := f.Body.(type) {
	case *proto.Frame_Dial:
		if d.upstreams[b.Dial.GetUpstream()] == nil {
			return fmt.Sprintf("Dial for %q, which is no configured upstream", b.Dial.GetUpstream())
		}
	case *proto.Frame_RateCheck:
		if c := d.conns[b.RateCheck.GetConnId()]; c == nil || c.worker != w {
			return fmt.Sprintf("RateCheck for connection %d it does not hold", b.RateCheck.GetConnId())
		}
		if d.cfg.RateLimitByName(b.RateCheck.GetClass()) == nil {
			return fmt.Sprintf("RateCheck for unknown class %q", b.RateCheck.GetClass())
		}
	}
	return ""
}

// statsMax keeps a StatsReply under the frame cap.
const statsMax = 60 << 10

// dial starts a connection to a configured upstream on the worker's behalf,
// or refuses at once when the upstream is at max_connections.
func (d *dispatcher) dial(w *workerProc, id uint64, name string) bool {
	u := d.upstreams[name]
	if u.held+u.dialing >= u.cfg.MaxConnections {
		w.slots.Release()
		d.c.upstreamRefused++
		d.send(w, &proto.Frame{Id: id, Body: &proto.Frame_DialReply{DialReply: &proto.DialReply{Refused: true, Error: "upstream at max_connections"}}}, -1)
		return true
	}
	u.dialing++
	addr := u.cfg.Addresses[u.next%len(u.cfg.Addresses)]
	u.next++
	go d.s.dial(dialResult{slot: w.slot, gen: w.gen, id: id, upstream: name}, addr, u.cfg.ConnectTimeout)
	return true
}

// dial connects to addr within timeout and posts the result; the loop hands
// the descriptor to the worker.
func (s *Supervisor) dial(r dialResult, addr netip.AddrPort, timeout time.Duration) {
	r.fd = -1
	c, err := (&net.Dialer{Timeout: timeout}).Dial("tcp", addr.String())
	if err != nil {
		r.err = err
		s.post(r)
		return
	}
	// A close-on-exec duplicate for the worker; the original closes here.
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err == nil {
		cerr := rc.Control(func(fd uintptr) {
			r.fd, err = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
		})
		if err == nil {
			err = cerr
		}
	}
	c.Close()
	r.err = err
	s.post(r)
}

// dialed hands a finished dial to its worker, releasing the request's slot
// before the reply is written.
func (d *dispatcher) dialed(r dialResult) {
	u := d.upstreams[r.upstream]
	if u != nil {
		u.dialing--
	}
	w := d.workerFor(r.slot, r.gen)
	if w == nil || w.ch == nil {
		if r.fd >= 0 {
			unix.Close(r.fd)
		}
		return
	}
	w.slots.Release()
	if r.err != nil {
		d.c.upstreamErrors++
		var ne net.Error
		timedOut := errors.As(r.err, &ne) && ne.Timeout()
		d.send(w, &proto.Frame{Id: r.id, Body: &proto.Frame_DialReply{DialReply: &proto.DialReply{Error: r.err.Error(), TimedOut: timedOut}}}, -1)
		return
	}
	if u != nil {
		u.held++
	}
	if w.held == nil {
		w.held = make(map[string]int)
	}
	w.held[r.upstream]++
	d.sendOwned(w, &proto.Frame{Id: r.id, Body: &proto.Frame_DialReply{DialReply: &proto.DialReply{Ok: true}}}, r.fd)
}

// releaseUpstreams forgets the upstream connections of a gone worker
// process: its descriptors died with it.
func (d *dispatcher) releaseUpstreams(w *workerProc) {
	for name, n := range w.held {
		if u := d.upstreams[name]; u != nil {
			u.held -= n
		}
	}
	w.held = nil
}

// rateCheck charges a request to a rate limit class. The client charged is
// the one recorded for the connection, never an address the worker names;
// behind a trusted proxy, the X-Forwarded-For values the worker relays are
// walked here.
func (d *dispatcher) rateCheck(w *workerProc, id uint64, m *proto.RateCheck, now time.Time) bool {
	c := d.conns[m.GetConnId()]
	rl := d.cfg.RateLimitByName(m.GetClass())
	key := c.client.key
	if c.client.trusted && len(m.GetForwardedFor()) > 0 {
		key = d.forwardedClient(m.GetForwardedFor(), key)
	}
	ok, wait := d.limiter.take(key, rl, now)
	if !ok {
		d.c.rateLimited++
	}
	w.slots.Release()
	d.send(w, &proto.Frame{Id: id, Body: &proto.Frame_RateReply{RateReply: &proto.RateReply{Allowed: ok, RetryAfterMs: uint64(wait.Milliseconds())}}}, -1)
	return true
}

// forwardedClient walks X-Forwarded-For from the right past trusted proxies
// and returns the key of the first other entry if it is a valid IP literal,
// else the peer's key (docs/DESIGN.md §4.3). At
// most maxForwardedFor entries are considered.
func (d *dispatcher) forwardedClient(values []string, peer netip.Addr) netip.Addr {
	seen := 0
	for i := len(values) - 1; i >= 0 && seen < maxForwardedFor; i-- {
		parts := strings.Split(values[i], ",")
		for j := len(parts) - 1; j >= 0 && seen < maxForwardedFor; j-- {
			e := strings.TrimSpace(parts[j])
			if e == "" {
				continue
			}
			seen++
			a, err := netip.ParseAddr(e)
			if err != nil || a.Zone() != "" {
				return peer
			}
			if d.trusted(a) {
				continue
			}
			return clientKey(a, d.cfg.IPv6ClientPrefixLength)
		}
	}
	return peer
}

// setUpstreams matches the upstream table to the configuration, keeping the
// counts of upstreams that stay.
func (d *dispatcher) setUpstreams() {
	keep := make(map[string]*upstreamState, len(d.cfg.Upstreams))
	for _, u := range d.cfg.Upstreams {
		st := d.upstreams[u.Name]
		if st == nil {
			st = &upstreamState{}
		}
		st.cfg = u
		keep[u.Name] = st
	}
	d.upstreams = keep
}
