package worker

import (
	"crypto/tls"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/worker/accesslog"
	"github.com/hashicorp/go-hclog"
)

// setup is the worker's configuration from Hello: built once by newSetup
// and never changed after, so the rounds read it without a lock. What
// changes at runtime is the lifecycle's, the log's level (LogLevel) and
// the TLS configurations' session ticket keys (TicketKeys).
type setup struct {
	cfg    *config.Config
	router *router                // the routes, their handlers and upstream pools
	tls    map[string]*tls.Config // by listener name
	access *accesslog.Log         // nil when the access log is off; its output comes in AccessLog
	id     uint32                 // the worker's number, for the access log
	conc   int                    // the dispatches served at once
	// hotWindow is how long a connection is kept after its input is used
	// up; dispatchAge how long one dispatch may last (maxDispatchAge).
	hotWindow   time.Duration
	dispatchAge time.Duration
}

// lifecycle is what changes while a worker runs: its slots, the
// supervisor's pressure and the drain.
type lifecycle struct {
	active atomic.Int32 // slots taken by dispatches
	// serving counts the dispatches being served, from the Dispatch frame
	// to their Done.
	serving atomic.Int64
	// pressure is on while a connection waits for a slot somewhere.
	pressure atomic.Bool
	draining atomic.Bool
	// retire is set by a Drain with retire: the TLS connections kept here
	// are served until each ends before the worker exits.
	retire   atomic.Bool
	drained  atomic.Bool // every round finished after a drain
	exitOnce sync.Once
}

// newSetup builds w's setup from the supervisor's Hello.
func (w *Worker) newSetup(h *proto.Hello) (*setup, error) {
	cfg, err := config.Parse(h.GetConfig(), h.GetConfigName(), config.ParseOptions{BaseDir: h.GetBaseDir(), SkipFSChecks: true})
	if err != nil {
		return nil, fmt.Errorf("parsing configuration from Hello: %w", err)
	}
	if err := cfg.SetHtpasswd(htpasswdOf(h.GetHtpasswd())); err != nil {
		return nil, fmt.Errorf("htpasswd entries from Hello: %w", err)
	}
	rt, err := newRouter(w, cfg, w.roots)
	if err != nil {
		return nil, err
	}
	tc, err := w.tlsConfigs(h.GetCertificates())
	if err != nil {
		return nil, err
	}
	s := &setup{
		cfg: cfg, router: rt, tls: tc, id: h.GetWorkerId(),
		conc:        max(1, int(h.GetConcurrency())),
		hotWindow:   cfg.Workers.HotWindow,
		dispatchAge: maxDispatchAge,
	}
	if w.testDispatchAge != 0 {
		s.dispatchAge = w.testDispatchAge
	}
	if err := s.setTicketKeys(h.GetTicketKeys()); err != nil {
		return nil, err
	}
	if cfg.Log.AccessLog {
		s.access = accesslog.New(cfg.Log.AccessLogFormat, cfg.Log.AccessLogQuery, cfg.Log.AccessLogBuffer, cfg.Log.AccessLogFlush, w.log)
	}
	return s, nil
}

// hello applies the supervisor's configuration: the setup, and the
// mechanisms sized by it.
func (w *Worker) hello(h *proto.Hello) error {
	s, err := w.newSetup(h)
	if err != nil {
		return err
	}
	w.setup = s
	if t := h.GetThreads(); t > 0 {
		runtime.GOMAXPROCS(int(t))
	}
	w.srv = newServers(s.conc)
	w.hotMu.Lock()
	w.hot = make(map[*connServer]struct{})
	w.hotMu.Unlock()
	w.calls.slots = ipc.NewInFlight(s.cfg.Limits.IPCMaxInFlightRequests)
	w.log.SetLevel(hclog.LevelFromString(s.cfg.Log.Level))
	return nil
}

// pool returns the upstream pool of name, nil if none (or before Hello).
func (w *Worker) pool(name string) *upstreamPool {
	if w.setup == nil {
		return nil
	}
	return w.router.pools[name]
}
