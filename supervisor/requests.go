package supervisor

import (
	"bytes"
	"net/netip"
	"strings"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/internal/sysio"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/cluster"
	"github.com/gatehouse-dev/gatehouse/supervisor/limits"
	"github.com/gatehouse-dev/gatehouse/supervisor/view"
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
// The local bucket is always charged: it counts this instance's requests
// only, so it refuses only what the shared bucket would refuse too, and it
// is up to date the moment the store goes away. What it allows, the cluster
// store decides when there is one (askStore). A peek charges neither.
func (d *dispatcher) rateCheck(w *workerProc, id uint64, c *conn, class string, peek bool, now time.Time) {
	rl := d.cfg.RateLimitByName(class)
	key := d.rateKey(c)
	take := d.limiter.Take
	if peek {
		take = d.limiter.Peek
	}
	ok, wait := take(key, rl, now)
	if ok && d.askStore(w, id, key, rl, peek, now) {
		return // the worker's slot is held until the answer
	}
	d.rateAnswer(w, id, ok, wait)
}

// rateAnswer answers a worker's RateCheck.
func (d *dispatcher) rateAnswer(w *workerProc, id uint64, ok bool, wait time.Duration) {
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

// The cluster store (supervisor/cluster). The loop never waits for it: a
// rate check is queued to the store's goroutines and its worker answered
// when the result is posted back, or after cluster.store_timeout from the
// local bucket, whichever comes first.

// askStore queues a check the local bucket allowed to the store and
// reports whether it did; when it did not (no store, store down, queue
// full) the local decision stands.
func (d *dispatcher) askStore(w *workerProc, id uint64, key netip.Addr, rl *config.RateLimit, peek bool, now time.Time) bool {
	if d.store == nil {
		return false
	}
	if d.storeUp {
		token := d.ratePending.Add(pendingRate{slot: w.slot, gen: w.gen, id: id}, now)
		if d.store.Rate(cluster.RateReq{Token: token, Class: rl.Name, Client: key.String(), Interval: rl.Per / time.Duration(rl.Rate), Burst: rl.Burst, Peek: peek}) {
			return true
		}
		d.ratePending.Take(token)
	}
	d.c.rateStoreLocal++
	return false
}

// rateStored answers the check the store decided, unless its timeout
// answered it already.
func (d *dispatcher) rateStored(m cluster.RateResult) {
	p, ok := d.ratePending.Take(m.Token)
	if !ok {
		return
	}
	w := d.workerFor(p.slot, p.gen)
	if w == nil || w.ch == nil {
		return
	}
	if m.Err != nil {
		d.c.rateStoreErrors++
		d.rateAnswer(w, p.id, true, 0) // the local bucket allowed it
		return
	}
	d.c.rateStored++
	d.rateAnswer(w, p.id, m.Allowed, m.RetryAfter)
}

// rateUnanswered answers a check the store did not decide within
// store_timeout (or before it went down) as the local bucket did: allowed.
func (d *dispatcher) rateUnanswered(p pendingRate) {
	d.c.rateStoreTimeouts++
	if w := d.workerFor(p.slot, p.gen); w != nil && w.ch != nil {
		d.rateAnswer(w, p.id, true, 0)
	}
}

// penaltyShared refuses a client another instance penalized.
func (d *dispatcher) penaltyShared(m cluster.Penalty, now time.Time) {
	key := limits.ClientKey(m.Client, d.cfg.IPv6ClientPrefixLength)
	if d.penalties.Impose(key, now.Add(m.Remaining), now) {
		d.log.Warn("client refused: penalized by another instance", "client", d.logClient(key), "instance", m.From, "refused_for", m.Remaining.Round(time.Second))
	}
}

// storeState follows the link's state; each change is posted, and so
// logged, once. While the store is down every decision is this instance's
// own, and the checks waiting for it are answered at once.
func (d *dispatcher) storeState(m cluster.State, now time.Time) {
	if m.Up == d.storeUp && (m.Up || d.storeErr != "") {
		return
	}
	d.storeUp, d.storeErr, d.storeSince = m.Up, m.Err, now
	if m.Up {
		d.log.Info("cluster store reachable: rate limits and penalties are shared", "store", d.store.Address(), "instance", d.store.Instance())
		// The penalties in force here, some perhaps imposed while the
		// store was away or lost with a store that restarted empty.
		for _, p := range d.penalties.List(now) {
			if a, err := netip.ParseAddr(p.Key); err == nil && p.Remaining > 0 {
				d.store.Penalize(a, p.Remaining)
			}
		}
		return
	}
	d.log.Warn("cluster store unreachable: rate limits and penalties are this instance's own until it is back", "store", d.store.Address(), "error", m.Err)
	if d.tickets.shared {
		// The shared keys stay in use; this instance rotates its own
		// from an hour on, should the store stay away that long.
		d.tickets.shared, d.tickets.rotated = false, now
	}
	d.ratePending.Expire(now.Add(time.Hour), d.rateUnanswered)
}

// clusterSnapshot adds the link's state and its counters to s.
func (d *dispatcher) clusterSnapshot(s *view.Snapshot) {
	if d.store == nil {
		return
	}
	s.Cluster = &view.ClusterInfo{Instance: d.store.Instance(), Address: d.store.Address(), Up: d.storeUp, Since: d.storeSince, Error: d.storeErr, SharedTickets: d.tickets.shared}
	s.Counters["client_penalties_shared"] = d.penalties.Imported()
	s.Counters["rate_store_decisions"] = d.c.rateStored
	s.Counters["rate_store_timeouts"] = d.c.rateStoreTimeouts
	s.Counters["rate_store_errors"] = d.c.rateStoreErrors
	s.Counters["rate_store_local"] = d.c.rateStoreLocal
}

// A closing connection (docs/DESIGN.md §2.8): when the head the dispatcher
// already checked says that the connection ends with this request, the
// dispatcher gives its copy of the descriptor up with the Dispatch (the
// channel closes it once sent) and only counts the slot back at the Done.
// The connection costs the supervisor no re-arm, no shutdown and no close
// at the Done, and the client gets its FIN as soon as the worker closes.
//
// The look at the head stays one of bytes, as forwardedFor's: the request
// line's version and the Connection fields' tokens, by the rule the
// worker's parser applies (httphead.Head.Persistent), and nothing else. It
// is conservative: a head with a body (Content-Length, Transfer-Encoding),
// with bytes after it, a folded line, or anything it does not recognise
// keeps the supervisor's copy, and the round ends as any other. A head it
// wrongly took for a closing one (a worker that keeps the connection alive
// after all) costs that connection its next request: with no copy left,
// the dispatcher closes it at the Done whatever it says.

// closingHead reports whether head, a complete request head and all the
// input there is, asks for the connection to close after its response
// and declares no body: HTTP/1.0 without a keep-alive token, or any
// version with a close token in a Connection field.
func closingHead(head []byte) bool {
	first := true
	v10, closes, keepAlive := false, false, false
	// A head is at most headend.MaxHead bytes, so this loop is bounded.
	for len(head) > 0 {
		i := bytes.IndexByte(head, '\n')
		if i < 0 {
			return false
		}
		line := bytes.TrimSuffix(head[:i], []byte{'\r'})
		head = head[i+1:]
		switch {
		case len(line) == 0 && first:
			continue // an empty line before the request line
		case len(line) == 0:
			return len(head) == 0 && (closes || v10 && !keepAlive)
		case first:
			first = false
			v10 = bytes.HasSuffix(line, []byte(" HTTP/1.0"))
			continue
		case line[0] == ' ' || line[0] == '\t':
			return false // obs-fold: the worker refuses it; not ours to judge
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return false
		}
		name := line[:colon]
		switch {
		case bytes.EqualFold(name, []byte("content-length")), bytes.EqualFold(name, []byte("transfer-encoding")):
			return false
		case !bytes.EqualFold(name, []byte("connection")):
			continue
		}
		for tok := range bytes.SplitSeq(line[colon+1:], []byte(",")) {
			tok = bytes.Trim(tok, " \t")
			switch {
			case bytes.EqualFold(tok, []byte("close")):
				closes = true
			case bytes.EqualFold(tok, []byte("keep-alive")):
				keepAlive = true
			}
		}
	}
	return false
}
