package supervisor

import (
	"bytes"
	"net/netip"
	"strings"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/sysio"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/limits"
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

// rateCheck charges a request on c to a rate limit class. The key charged is
// one the dispatcher derived itself (rateKey), never one the worker names.
func (d *dispatcher) rateCheck(w *workerProc, id uint64, c *conn, class string, now time.Time) {
	rl := d.cfg.RateLimitByName(class)
	ok, wait := d.limiter.Take(d.rateKey(c), rl, now)
	if !ok {
		d.c.rateLimited++
	}
	w.slots.Release()
	d.send(w, &proto.Frame{Id: id, Body: &proto.Frame_RateReply{RateReply: &proto.RateReply{Allowed: ok, RetryAfterMs: uint64(wait.Milliseconds())}}}, -1)
}

// rateKey is the client key a request on c is charged to: the one recorded
// for the connection or, behind a trusted proxy, the one derived from the
// head the dispatcher saw for this dispatch (deriveRateKey).
func (d *dispatcher) rateKey(c *conn) netip.Addr {
	if k, ok := d.rateKeys[c.id]; ok {
		return k
	}
	return c.client.key
}

// deriveRateKey records, for c from a trusted proxy about to be dispatched,
// the client its head names in X-Forwarded-For, as rate limits charge it:
// from the bytes the dispatcher saw itself (the head carried, or still in
// the socket), so a worker cannot name a key. A TLS connection's head is
// plaintext only the worker sees: its requests charge the proxy. Per
// dispatch, the worker serves one request of such a connection (its next
// head comes back carried), so each request is charged its own client.
func (d *dispatcher) deriveRateKey(c *conn) {
	if c.tls || len(d.cfg.RateLimits) == 0 {
		return
	}
	head := c.carried
	if len(head) == 0 {
		n, err := sysio.Recv(c.fd, d.peekBuf, unix.MSG_PEEK)
		if err != nil || n <= 0 {
			return
		}
		head = d.peekBuf[:n]
	}
	k := d.forwardedClient(forwardedFor(head), c.client.key)
	if k == c.client.key {
		return
	}
	if d.rateKeys == nil {
		d.rateKeys = make(map[uint64]netip.Addr)
	}
	d.rateKeys[c.id] = k
}

// forwardedFor returns the values of the X-Forwarded-For fields of the
// request head at the start of b, in order (an incomplete or malformed head
// yields what its complete lines hold: the worker refuses such a request
// before any rate check).
func forwardedFor(b []byte) []string {
	var vals []string
	const name = "x-forwarded-for:"
	for first := true; ; first = false {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return vals
		}
		line := bytes.TrimSuffix(b[:i], []byte{'\r'})
		b = b[i+1:]
		switch {
		case first:
			continue // the request line
		case len(line) == 0:
			return vals // the end of the head
		case len(line) >= len(name) && bytes.EqualFold(line[:len(name)], []byte(name)):
			vals = append(vals, string(bytes.TrimSpace(line[len(name):])))
		}
	}
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
			return limits.ClientKey(a, d.cfg.IPv6ClientPrefixLength)
		}
	}
	return peer
}
