package worker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/proto"
)

// Errors of an upstream dial through the supervisor.
var (
	errUpstreamRefused = errors.New("worker: upstream at max_connections")
	errUpstreamTimeout = errors.New("worker: upstream connect timed out")
)

// dialError is a dial the supervisor attempted and failed. It has already
// tried the upstream's other addresses, so the worker does not retry it.
type dialError struct{ msg string }

func (e *dialError) Error() string { return "worker: dialing upstream: " + e.msg }

// upstreamPool is a worker's connections to one upstream: an http.Transport
// whose dials are requests to the supervisor, shared by every route that
// proxies to the upstream, so the supervisor can ask for its idle
// connections back (Reclaim).
type upstreamPool struct {
	w  *Worker
	up *config.Upstream // immutable
	tr *http.Transport
}

// upstreamPool returns rt's pool for up, creating it once while rt is
// built.
func (rt *router) upstreamPool(w *Worker, up *config.Upstream) *upstreamPool {
	if p := rt.pools[up.Name]; p != nil {
		return p
	}
	p := &upstreamPool{w: w, up: up}
	p.tr = &http.Transport{
		DialContext:         func(ctx context.Context, _, _ string) (net.Conn, error) { return p.dial(ctx) },
		MaxIdleConns:        proxyIdlePerWorker,
		MaxIdleConnsPerHost: proxyIdlePerWorker,
		// No MaxConnsPerHost: the supervisor counts max_connections and
		// refuses at once beyond it; a cap here would queue requests
		// behind held connections.
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: up.ResponseTimeout,
		DisableCompression:    true,
	}
	if rt.pools == nil {
		rt.pools = make(map[string]*upstreamPool)
	}
	rt.pools[up.Name] = p
	return p
}

// RoundTrip sends the request, again on a fresh connection (another address
// in the supervisor's rotation) when it is idempotent, carries no body and
// failed before any response byte (nginx's proxy_next_upstream error).
func (p *upstreamPool) RoundTrip(req *http.Request) (*http.Response, error) {
	tries := min(maxProxyTries, len(p.up.Addresses))
	for try := 1; ; try++ {
		res, err := p.tr.RoundTrip(req)
		if err == nil || try >= tries || !retryable(req, err) {
			return res, err
		}
		p.w.log.Debug("retrying on the next upstream connection", "upstream", p.up.Name, "try", try, "error", err)
	}
}

// retryable reports whether a failed round trip may be sent again: nothing
// of the request body can have been consumed, the method is idempotent, and
// the failure was neither a refusal, a dial the supervisor already retried,
// nor a timeout (a clean 504 rather than another wait).
func retryable(req *http.Request, err error) bool {
	if req.Body != nil && req.Body != http.NoBody {
		return false
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPut, http.MethodDelete:
	default:
		return false
	}
	var de *dialError
	var ne net.Error
	switch {
	case req.Context().Err() != nil,
		errors.Is(err, errUpstreamRefused), errors.Is(err, errUpstreamTimeout), errors.Is(err, errOverloaded),
		errors.As(err, &de), errors.As(err, &ne) && ne.Timeout():
		return false
	}
	return true
}

// reclaim closes the pool's idle connections (each close sends its
// release) and then tells the supervisor it is done.
func (p *upstreamPool) reclaim() {
	p.tr.CloseIdleConnections()
	p.w.ch.Send(&proto.Frame{Body: &proto.Frame_Reclaimed{Reclaimed: &proto.Reclaimed{Upstream: p.up.Name}}}, -1)
}

// reclaim answers the supervisor's Reclaim for upstream name.
func (w *Worker) reclaim(name string) {
	if p := w.pool(name); p != nil {
		p.reclaim()
		return
	}
	w.ch.Send(&proto.Frame{Body: &proto.Frame_Reclaimed{Reclaimed: &proto.Reclaimed{Upstream: name}}}, -1)
}

// dial asks the supervisor for a connection to the upstream.
func (p *upstreamPool) dial(ctx context.Context) (net.Conn, error) {
	name := p.up.Name
	r, err := p.w.calls.call(ctx, &proto.Frame{Body: &proto.Frame_Dial{Dial: &proto.Dial{Upstream: name}}}, func(r reply) {
		closeFD(r.fd)
		if dr := r.f.GetDialReply(); dr.GetOk() {
			p.release(dr.GetConn())
		}
	})
	if err != nil {
		return nil, err
	}
	dr := r.f.GetDialReply()
	switch {
	case dr == nil:
		closeFD(r.fd)
		return nil, fmt.Errorf("worker: unexpected reply %T to Dial", r.f.Body)
	case dr.GetRefused():
		return nil, errUpstreamRefused
	case dr.GetTimedOut():
		return nil, errUpstreamTimeout
	case !dr.GetOk():
		return nil, &dialError{msg: dr.GetError()}
	}
	id := dr.GetConn()
	f := os.NewFile(uintptr(r.fd), "upstream")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		p.release(id)
		return nil, err
	}
	return &upstreamConn{Conn: c, read: p.up.ReadTimeout, send: p.up.SendTimeout, release: func() { p.release(id) }}, nil
}

// release tells the supervisor an upstream connection was closed.
func (p *upstreamPool) release(id uint64) {
	p.w.ch.Send(&proto.Frame{Body: &proto.Frame_UpstreamRelease{UpstreamRelease: &proto.UpstreamRelease{Upstream: p.up.Name, Conn: id}}}, -1)
}

// upstreamConn is one upstream connection: every read waits at most
// read_timeout and every write send_timeout, and closing it releases its
// place in the upstream's budget.
type upstreamConn struct {
	net.Conn
	read, send time.Duration
	once       sync.Once
	release    func()
}

func (c *upstreamConn) Read(p []byte) (int, error) {
	c.Conn.SetReadDeadline(time.Now().Add(c.read))
	return c.Conn.Read(p)
}

func (c *upstreamConn) Write(p []byte) (int, error) {
	c.Conn.SetWriteDeadline(time.Now().Add(c.send))
	return c.Conn.Write(p)
}

func (c *upstreamConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
