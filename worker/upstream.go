package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/proto"
)

// releaseWait bounds a dial's wait for the worker's own release to reach
// the supervisor first (dial).
const releaseWait = 100 * time.Millisecond

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
	// share is the worker's share of the upstream's max_connections.
	share int32
	// inUse counts the requests and upgrades that hold or wait for one of
	// the pool's connections; past share a request is refused at once.
	inUse atomic.Int32
	// held counts the connections the supervisor granted and the worker
	// has not released; released wakes a dial waiting for it to drop.
	held     atomic.Int32
	released chan struct{}
}

// upstreamPool returns rt's pool for up, creating it once while rt is
// built; workers is the configuration's worker count, which divides the
// upstream's max_connections into shares.
func (rt *router) upstreamPool(w *Worker, up *config.Upstream, workers int) *upstreamPool {
	if p := rt.pools[up.Name]; p != nil {
		return p
	}
	share := up.WorkerShare(workers)
	p := &upstreamPool{w: w, up: up, share: int32(share), released: make(chan struct{}, 1)}
	p.tr = &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return p.dial(ctx) },
		// The transport never dials past the worker's share, which the
		// supervisor would refuse: without the cap it dialed whenever a
		// connection was on its way back to the idle pool, and such a dial
		// could beat the connection with a 503. A request waits for a
		// connection only while fewer than share are in use (acquire), so
		// one is always coming back.
		MaxConnsPerHost:       share,
		MaxIdleConns:          share,
		MaxIdleConnsPerHost:   share,
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
	if err := p.acquire(req.Context()); err != nil {
		return nil, err
	}
	tries := min(maxProxyTries, len(p.up.Addresses))
	for try := 1; ; try++ {
		res, err := p.tr.RoundTrip(req)
		if err == nil {
			res.Body = p.tracked(res.Body)
			return res, nil
		}
		if try >= tries || !retryable(req, err) {
			p.inUse.Add(-1)
			return nil, err
		}
		p.w.log.Debug("retrying on the next upstream connection", "upstream", p.up.Name, "try", try, "error", err)
	}
}

// acquire counts a request (or an upgrade) in use until its release.
// Past the worker's share the supervisor has the last word, as for any
// dial: it refuses (and counts the refusal), or grants a connection, which
// means one is free after all (a finished response whose body is not closed
// yet); that one is given back and the request goes on.
func (p *upstreamPool) acquire(ctx context.Context) error {
	if p.inUse.Add(1) <= p.share {
		return nil
	}
	c, err := p.dial(ctx)
	if err != nil {
		p.inUse.Add(-1)
		return err
	}
	c.Close()
	return nil
}

// tracked returns body, which counts its request in use until closed. An
// upgraded response's body is the connection, and stays writable.
func (p *upstreamPool) tracked(body io.ReadCloser) io.ReadCloser {
	if w, ok := body.(io.Writer); ok {
		return &trackedConn{trackedBody: trackedBody{ReadCloser: body, p: p}, w: w}
	}
	return &trackedBody{ReadCloser: body, p: p}
}

type trackedBody struct {
	io.ReadCloser
	p    *upstreamPool
	once sync.Once
}

func (b *trackedBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(func() { b.p.inUse.Add(-1) })
	return err
}

type trackedConn struct {
	trackedBody
	w io.Writer
}

func (c *trackedConn) Write(p []byte) (int, error) { return c.w.Write(p) }

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

// dial asks the supervisor for a connection to the upstream. With the
// worker's share held, the connections idle in the pool give way first (an
// upgrade dials outside the pool, so they may be all of it); and the
// transport may dial as soon as it has closed a connection, before that
// connection's release is sent: the dial waits (at most releaseWait) for
// the release to go first, or the supervisor would refuse it.
func (p *upstreamPool) dial(ctx context.Context) (net.Conn, error) {
	if p.held.Load() >= p.share {
		p.tr.CloseIdleConnections()
	}
	if p.held.Load() >= p.share {
		t := time.NewTimer(releaseWait)
		for p.held.Load() >= p.share {
			select {
			case <-p.released:
				continue
			case <-t.C:
			case <-ctx.Done():
			}
			break
		}
		t.Stop()
	}
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
	p.held.Add(1)
	return &upstreamConn{Conn: c, read: p.up.ReadTimeout, send: p.up.SendTimeout, release: func() { p.give(id) }}, nil
}

// release tells the supervisor an upstream connection was closed.
func (p *upstreamPool) release(id uint64) {
	p.w.ch.Send(&proto.Frame{Body: &proto.Frame_UpstreamRelease{UpstreamRelease: &proto.UpstreamRelease{Upstream: p.up.Name, Conn: id}}}, -1)
}

// give releases a connection the worker held, then wakes a dial waiting
// for it, whose Dial is thus sent after the release.
func (p *upstreamPool) give(id uint64) {
	p.release(id)
	p.held.Add(-1)
	select {
	case p.released <- struct{}{}:
	default:
	}
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
