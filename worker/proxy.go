package worker

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"sync"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/hashicorp/go-hclog"
)

// Errors of an upstream dial through the supervisor.
var (
	errUpstreamRefused = errors.New("worker: upstream at max_connections")
	errUpstreamTimeout = errors.New("worker: upstream connect timed out")
)

// proxyIdlePerWorker bounds the idle upstream connections a worker keeps
// per upstream.
const proxyIdlePerWorker = 8

// newProxy forwards a route's requests to an upstream. The worker cannot
// open a socket: every upstream connection is dialed by the supervisor and
// passed over the channel, and released back to its count when closed.
func (w *Worker) newProxy(up *config.Upstream) http.Handler {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return w.dialUpstream(ctx, up.Name)
		},
		MaxIdleConns:        proxyIdlePerWorker,
		MaxIdleConnsPerHost: proxyIdlePerWorker,
		// No MaxConnsPerHost: the supervisor counts max_connections over
		// all workers and refuses at once beyond it; a per-worker cap here
		// would queue requests behind held connections (issue 4: "never
		// a queue").
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: up.ResponseTimeout,
		DisableCompression:    true,
	}
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// The upstream name is only the pool's key: DialContext
			// ignores the address.
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = up.Name
			pr.Out.Host = pr.In.Host
			// X-Forwarded-For comes from the supervisor's record of the
			// peer; a trusted proxy's own list is kept in front of it.
			if w.trustedPeer(pr.In.RemoteAddr) {
				if prior := pr.In.Header.Values("X-Forwarded-For"); len(prior) > 0 {
					pr.Out.Header["X-Forwarded-For"] = prior
				}
			}
			pr.SetXForwarded()
		},
		Transport:     tr,
		FlushInterval: 50 * time.Millisecond,
		ErrorLog:      log.New(logWriter{w}, "", 0),
		ErrorHandler: func(rw http.ResponseWriter, r *http.Request, err error) {
			status, text := http.StatusBadGateway, "502 bad gateway: the upstream failed\n"
			var ne net.Error
			switch {
			case errors.Is(err, errUpstreamRefused), errors.Is(err, errOverloaded):
				status, text = http.StatusServiceUnavailable, "503 service unavailable: the upstream is busy\n"
				rw.Header().Set("Retry-After", "5")
			case errors.Is(err, errUpstreamTimeout), errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
				status, text = http.StatusGatewayTimeout, "504 gateway timeout: the upstream did not answer in time\n"
			}
			level := hclog.Warn
			if status == http.StatusServiceUnavailable {
				level = hclog.Debug // refused by design, counted by the supervisor
			}
			w.log.Log(level, "proxy error", "upstream", up.Name, "status", status, "error", err)
			rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
			rw.WriteHeader(status)
			fmt.Fprint(rw, text)
		},
	}
}

// dialUpstream asks the supervisor for a connection to upstream name.
func (w *Worker) dialUpstream(ctx context.Context, name string) (net.Conn, error) {
	r, err := w.calls.call(ctx, &proto.Frame{Body: &proto.Frame_Dial{Dial: &proto.Dial{Upstream: name}}}, func(r reply) {
		closeFD(r.fd)
		if r.f.GetDialReply().GetOk() {
			w.releaseUpstream(name)
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
		return nil, fmt.Errorf("worker: dialing upstream %s: %s", name, dr.GetError())
	}
	f := os.NewFile(uintptr(r.fd), "upstream")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		w.releaseUpstream(name)
		return nil, err
	}
	return &upstreamConn{Conn: c, release: func() { w.releaseUpstream(name) }}, nil
}

// releaseUpstream tells the supervisor an upstream connection was closed.
func (w *Worker) releaseUpstream(name string) {
	w.ch.Send(&proto.Frame{Body: &proto.Frame_UpstreamRelease{UpstreamRelease: &proto.UpstreamRelease{Upstream: name}}}, -1)
}

// upstreamConn releases its place in the upstream's count when closed.
type upstreamConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *upstreamConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// trustedPeer reports whether the connection's peer is a trusted proxy.
func (w *Worker) trustedPeer(remote string) bool { return allowedAddr(w.cfg.TrustedProxies, remote) }

// logWriter sends net/http's internal log lines to the worker's log.
type logWriter struct{ w *Worker }

func (l logWriter) Write(p []byte) (int, error) {
	l.w.log.Warn(string(p))
	return len(p), nil
}
