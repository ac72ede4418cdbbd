package worker

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gatehouse-dev/gatehouse/worker/relay"
	"github.com/gatehouse-dev/gatehouse/worker/transport"
)

// hopByHop are the connection-specific fields of RFC 9110 §7.6.1 that a proxy
// does not forward (with any field the Connection field names).
var hopByHop = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// removeHopByHop deletes h's connection-specific fields.
func removeHopByHop(h http.Header) {
	for _, v := range h.Values("Connection") {
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				h.Del(f)
			}
		}
	}
	for _, f := range hopByHop {
		h.Del(f)
	}
}

// upgradeRequested returns the protocol an Upgrade request asks for
// (Connection names "upgrade" and Upgrade is set), or "".
func upgradeRequested(h http.Header) string {
	for _, v := range h.Values("Connection") {
		for _, f := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(f), "upgrade") {
				return strings.TrimSpace(h.Get("Upgrade"))
			}
		}
	}
	return ""
}

// dropUpgrade turns an Upgrade request the route does not allow into an
// ordinary one: Upgrade is hop-by-hop and is not forwarded (RFC 9110 §7.8).
func dropUpgrade(h http.Header) {
	h.Del("Upgrade")
	var keep []string
	for _, v := range h.Values("Connection") {
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f != "" && !strings.EqualFold(f, "upgrade") {
				keep = append(keep, f)
			}
		}
	}
	h.Del("Connection")
	if len(keep) > 0 {
		h.Set("Connection", strings.Join(keep, ", "))
	}
}

// serveUpgrade forwards an Upgrade request the route allows (docs/DESIGN.md
// §10). The connection first leaves the pool for the stream budget (503 at
// once over it); the request goes to the upstream on a connection of its own;
// a 101 naming the same protocol is relayed to the client and then both
// directions byte for byte until either side closes or idle_timeout passes
// without a byte. Any other answer is relayed as an ordinary response.
func (h *proxyHandler) serveUpgrade(rw http.ResponseWriter, r *http.Request, protocol string) {
	cs, _ := r.Context().Value(connKey{}).(*connServer)
	if cs == nil || cs.rw == nil || cs.fd < 0 && !cs.tls {
		h.fail(rw, r, errors.New("worker: upgrade without a client connection"))
		return
	}
	ctx := r.Context()
	if !cs.leavePool(ctx, true) {
		ownAnswer(rw)
		rw.Header().Set("Retry-After", "5")
		http.Error(rw, "503 service unavailable: too many long-lived connections", http.StatusServiceUnavailable)
		return
	}
	out := r.Clone(ctx)
	out.RequestURI = ""
	out.Close = false
	removeHopByHop(out.Header)
	for _, f := range []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
		out.Header.Del(f)
	}
	h.rewrite(&httputil.ProxyRequest{In: r, Out: out})
	out.Header.Set("Connection", "Upgrade")
	out.Header.Set("Upgrade", protocol)

	if err := h.pool.acquire(ctx); err != nil {
		h.fail(rw, r, err)
		return
	}
	defer h.pool.inUse.Add(-1)
	c, err := h.pool.dial(ctx)
	if err != nil {
		h.fail(rw, r, err)
		return
	}
	defer c.Close() // releases the upstream connection's place
	uc := c.(*upstreamConn)
	if err := out.Write(uc); err != nil {
		h.fail(rw, r, err)
		return
	}
	ubr := bufio.NewReaderSize(uc, 4<<10)
	uc.Conn.SetReadDeadline(time.Now().Add(h.pool.up.ResponseTimeout))
	res, err := http.ReadResponse(ubr, out)
	if err != nil {
		h.fail(rw, r, err)
		return
	}
	defer res.Body.Close()
	h.rules.Response(res)
	if res.StatusCode != http.StatusSwitchingProtocols {
		removeHopByHop(res.Header)
		for k, v := range res.Header {
			rw.Header()[k] = v
		}
		rw.WriteHeader(res.StatusCode)
		io.Copy(rw, res.Body)
		return
	}
	got := upgradeRequested(res.Header)
	if !strings.EqualFold(got, protocol) {
		h.fail(rw, r, errors.New("worker: the upstream switched to "+`"`+got+`"`+", not the protocol asked for"))
		return
	}
	hdr := res.Header.Clone()
	removeHopByHop(hdr)
	hdr.Set("Connection", "Upgrade")
	hdr.Set("Upgrade", got)
	resp := cs.rw
	resp.wroteHeader, resp.headerSent, resp.status, resp.keep = true, true, http.StatusSwitchingProtocols, false
	cs.upgraded = true
	writeHead(cs, http.StatusSwitchingProtocols, hdr)
	if err := cs.bw.Flush(); err != nil {
		return
	}
	// Bytes already read past the heads on either side go first.
	toUpstream := cs.leftover()
	toClient, _ := ubr.Peek(ubr.Buffered())
	toClient = append([]byte(nil), toClient...)
	// The round's buffers are not needed by a relay: back to the pools.
	cs.release()
	// A relay waits on both sides at once: a plain client under the
	// poller; a TLS one's transport is already.
	var client relay.Conn
	fd := cs.fd
	switch nc := cs.nc.(type) {
	case *transport.Plain:
		client = relay.SocketSide(nc.Poll())
	case *tls.Conn:
		client = relay.TLSSide(nc, cs.tnc)
		fd = cs.tfd
	}
	us, ok := uc.Conn.(relay.Socket)
	if client == nil || !ok {
		h.w.log.Error("upgraded connection not relayed", "upstream", h.pool.up.Name, "error", fmt.Errorf("worker: no relay from a %T to a %T", cs.nc, uc.Conn))
		return
	}
	// Each chunk goes out as it comes, as nginx does for an upgraded
	// connection: with Nagle's algorithm the short tail of a message
	// (a TLS record after a full one) waited for the client's delayed
	// ACK, 40 ms per message of 16 KiB and more. The upstream's side is
	// Go's, without Nagle already. Not a TCP socket: nothing to set.
	unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	sent, _ := relay.Run(client, relay.SocketSide(us), toUpstream, toClient, h.cfg.IdleTimeout)
	resp.written = sent
	h.w.log.Debug("upgraded connection closed", "upstream", h.pool.up.Name, "protocol", got, "bytes_to_client", sent)
}
