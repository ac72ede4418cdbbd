package supervisor

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/proto"
)

// Requests from workers (docs/DESIGN.md §4.2). Every request takes a slot of the
// channel's in-flight cap before it is started; over the cap it is answered
// at once with Overloaded, never queued or dropped. A slot is released
// before the reply is written, so a worker that keeps at most cap requests
// outstanding and waits for each reply is never refused
// (the admission race, docs/DESIGN.md §2.6).

// maxForwardedFor bounds the X-Forwarded-For entries the dispatcher walks.
const maxForwardedFor = 32

// request handles one worker request frame. It reports false when the worker
// was killed for it.
func (d *dispatcher) request(w *workerProc, f *proto.Frame, now time.Time) bool {
	if w.state != workerReady && w.state != workerDraining {
		d.killWorker(w, "request before Ready")
		return false
	}
	// Notices, not requests: no slot, no reply.
	if rel := f.GetUpstreamRelease(); rel != nil {
		return d.releaseUpstream(w, rel, now)
	}
	if rc := f.GetReclaimed(); rc != nil {
		return d.reclaimed(w, rc.GetUpstream(), now)
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
		return d.dial(w, f.GetId(), b.Dial.GetUpstream(), now)
	case *proto.Frame_RateCheck:
		return d.rateCheck(w, f.GetId(), b.RateCheck, now)
	case *proto.Frame_Sign:
		d.sign(w, f.GetId(), b.Sign)
	case *proto.Frame_BodyStart:
		d.bodyStart(w, f.GetId(), b.BodyStart, now)
	case *proto.Frame_BodyDone:
		d.bodyDone(w, f.GetId(), b.BodyDone, now)
	case *proto.Frame_StreamStart:
		d.streamStart(w, f.GetId(), b.StreamStart, now)
	case *proto.Frame_StatsRequest:
		d.serveStats(w, f.GetId(), now)
	}
	return true
}

// validRequest checks a request before it may take a slot: a malformed one
// kills the worker whether or not the channel is full. It returns the
// violation, or "".
func (d *dispatcher) validRequest(w *workerProc, f *proto.Frame) string {
	switch b := f.Body.(type) {
	case *proto.Frame_BodyStart, *proto.Frame_BodyDone:
		return d.validBodyRequest(w, f)
	case *proto.Frame_StreamStart:
		return d.validStreamStart(w, b.StreamStart)
	case *proto.Frame_Dial:
		if d.upstreams[b.Dial.GetUpstream()] == nil {
			return fmt.Sprintf("Dial for %q, which is no configured upstream", b.Dial.GetUpstream())
		}
	case *proto.Frame_Sign:
		return d.validSign(w, b.Sign)
	case *proto.Frame_RateCheck:
		if c := d.conns.get(b.RateCheck.GetConnId()); c == nil || c.worker != w {
			return fmt.Sprintf("RateCheck for connection %d it does not hold", b.RateCheck.GetConnId())
		}
		if d.cfg.RateLimitByName(b.RateCheck.GetClass()) == nil {
			return fmt.Sprintf("RateCheck for unknown class %q", b.RateCheck.GetClass())
		}
	}
	return ""
}

// rateCheck charges a request to a rate limit class. The client charged is
// the one recorded for the connection, never an address the worker names;
// behind a trusted proxy, the X-Forwarded-For values the worker relays are
// walked here.
func (d *dispatcher) rateCheck(w *workerProc, id uint64, m *proto.RateCheck, now time.Time) bool {
	c := d.conns.get(m.GetConnId())
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
