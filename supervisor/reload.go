package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/internal/expiry"
	"github.com/gatehouse-dev/gatehouse/supervisor/internal/poll"
	"github.com/gatehouse-dev/gatehouse/supervisor/logrelay"
	"github.com/gatehouse-dev/gatehouse/supervisor/secrets"
	"github.com/gatehouse-dev/gatehouse/supervisor/sockets"
	"github.com/gatehouse-dev/gatehouse/supervisor/upstream"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// ErrNoConfigFile is returned by Reload when gatehouse runs on its built-in
// configuration.
var ErrNoConfigFile = errors.New("supervisor: no configuration file to reload")

// reloadMsg carries a validated configuration into the loop.
type reloadMsg struct {
	spec  *workerSpec
	keys  *secrets.Ring // the TLS certificates and keys, reloaded
	added []listener    // bound for addresses the old configuration lacked
	// accessFD is the access log opened for the new configuration (-1:
	// off, which keeps the running one for the replaced workers' last
	// lines); the loop owns it once the message is sent.
	accessFD int
	// resolved and resolveErr are what the upstreams' host names
	// resolved to; a name that failed keeps its running addresses.
	resolved   upstream.Resolved
	resolveErr error
	reply      chan error
}

// Reload reads the configuration file again (SIGHUP). An invalid file keeps
// the running configuration; every error is logged and returned. What the
// dispatcher enforces changes at once; workers are replaced one at a time
// when what they were started with changed, without dropping a parked or an
// in-flight connection. Listeners are bound and closed to match the file.
func (s *Supervisor) Reload(ctx context.Context) error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	if s.opts.ConfigPath == "" {
		return ErrNoConfigFile
	}
	// The certificates are read below, where one that fails keeps the
	// running one instead of failing the reload.
	opt := config.ParseOptions{Handlers: s.opts.Handlers, SkipCertificates: true, AuthorizesUploads: s.opts.AuthorizesUploads}
	if s.heldRoots != nil {
		opt.OpenRoot = func(path string) (*os.File, error) { return s.heldRoots.Open(path, s.account) }
	}
	cfg, err := config.LoadWith(s.opts.ConfigPath, opt)
	if err != nil {
		s.log.Error("reload failed; keeping the running configuration", "error", err)
		return err
	}
	for _, w := range cfg.Warnings {
		s.log.Warn("configuration", "warning", w)
	}
	spec, err := s.newWorkerSpec(cfg)
	if err != nil {
		s.log.Error("reload failed; keeping the running configuration", "error", err)
		return err
	}
	keys, err := s.reloadKeys(cfg)
	if err != nil {
		return err
	}
	// Only this goroutine changes listeners (under reloadMu, through the
	// loop), so the published set is the loop's current one.
	bound := *s.bound.Load()
	var added []listener
	for _, l := range cfg.Listeners {
		if slices.ContainsFunc(bound, func(o boundAddr) bool { return o.cfg == l.Address }) {
			continue
		}
		fd, bound, err := sockets.Bind(l.Address)
		if err != nil {
			for _, a := range added {
				unix.Close(a.fd)
			}
			err = fmt.Errorf("%w: listener %q: %w", ErrBind, l.Name, err)
			s.log.Error("reload failed; keeping the running configuration", "error", err)
			return err
		}
		added = append(added, listener{name: l.Name, fd: fd, cfgAddr: l.Address, addr: bound, deferred: sockets.SetDeferAccept(fd)})
	}
	// The access log is reopened on every reload, as on SIGUSR1: its path
	// may have changed, or the file been rotated.
	accessFD, _, err := logrelay.Open(cfg.Log)
	if err != nil {
		for _, a := range added {
			unix.Close(a.fd)
		}
		s.log.Error("reload failed; keeping the running configuration", "error", err)
		return err
	}
	// Resolved here, off the loop; the loop logs a name that failed.
	resolved, resolveErr := upstream.Resolve(ctx, cfg.Upstreams)
	reply := make(chan error, 1)
	select {
	case s.msgs <- reloadMsg{spec: spec, keys: keys, added: added, accessFD: accessFD, resolved: resolved, resolveErr: resolveErr, reply: reply}:
		s.wake()
	case <-ctx.Done():
		for _, a := range added {
			unix.Close(a.fd)
		}
		if accessFD >= 0 {
			unix.Close(accessFD)
		}
		return ctx.Err()
	}
	if err := <-reply; err != nil {
		return err
	}
	if err := s.heldRoots.Keep(spec.roots, spec.rootPaths); err != nil {
		s.log.Error("keeping the static roots for the next reload", "error", err)
	}
	s.accessLog = cfg.Log
	s.keys = keys
	s.log.SetLevel(hclog.LevelFromString(cfg.Log.Level))
	if n := len(keys.Failures()); n > 0 {
		// Not "configuration reloaded": the certificates logged above
		// are not the file's.
		s.log.Error("reload incomplete: the configuration applies, but certificates could not be loaded (logged above)",
			"file", s.opts.ConfigPath, "certificates_not_loaded", n)
		return nil
	}
	s.log.Info("configuration reloaded", "file", s.opts.ConfigPath)
	return nil
}

// reloadKeys reads the TLS certificates and keys again, as the
// supervisor's account. One that fails to load keeps the running one and is
// logged, with its file and line (and the account, when it may not read
// one); a listener left with no certificate fails the reload. An expired
// certificate is served, with a warning, as at start.
func (s *Supervisor) reloadKeys(cfg *config.Config) (*secrets.Ring, error) {
	now := time.Now()
	keys, err := secrets.Reload(cfg, s.keys, &s.account, now)
	if err == nil {
		err = checkHello(cfg, keys)
	}
	if err != nil {
		s.log.Error("reload failed; keeping the running configuration", "error", err)
		return nil, err
	}
	for _, c := range keys.Certificates() {
		if now.After(c.NotAfter) {
			s.log.Warn("certificate expired; it is served, and clients will refuse it",
				"listener", c.Listener, "certificate", c.Name, "expiry", expiry.Text(c.NotAfter, now))
		}
	}
	for _, e := range keys.Failures() {
		what := "certificate not loaded; the running one is kept"
		if !e.Kept {
			what = "certificate not loaded; it is not served"
		}
		s.log.Error(what, "listener", e.Listener, "certificate", e.Name, "error", e.Error)
	}
	return keys, nil
}

// certificateErrors returns the certificates the last reload could not
// load.
func (s *Supervisor) certificateErrors() []secrets.CertificateError {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	return s.keys.Failures()
}

// reload applies a new configuration in the loop.
func (d *dispatcher) reload(m reloadMsg, now time.Time) {
	if d.stopping {
		for _, l := range m.added {
			unix.Close(l.fd)
		}
		if m.accessFD >= 0 {
			unix.Close(m.accessFD)
		}
		m.reply <- errors.New("supervisor: shutting down")
		return
	}
	old := d.cfg
	d.cfg, d.spec = m.spec.cfg, m.spec
	d.logLevel = "" // the file's level again, as the supervisor's
	d.pool, d.share = d.cfg.Workers.Pool(), d.cfg.Workers.Share()
	for _, cl := range d.clients {
		cl.trusted = d.trusted(cl.key)
	}
	d.reloadListeners(m.added)
	d.s.access.Set(m.accessFD)
	d.upstreams.Configure(d.cfg.Upstreams, m.resolved, m.resolveErr, d.cfg.Workers.Count)
	d.limiter.SetMax(d.cfg.RateLimitEntries)
	if !sameCluster(old.Cluster, d.cfg.Cluster) {
		d.log.Warn("the cluster block changed; it is read at start: the running link to the store is kept until a restart")
	}
	l := d.cfg.Limits
	d.penalties.Configure(l.DeathPenaltyThreshold, l.DeathPenaltyDuration, l.DeathPenaltyMaxClients)
	oldKeys := d.keys
	d.keys = m.keys
	if len(d.keys.Hello()) > 0 && d.tickets.rotated.IsZero() {
		d.rotateTickets(now) // the first TLS listener
	}

	if workersNeedReplacing(old, d.cfg) || !secrets.Same(oldKeys, d.keys) {
		for _, w := range d.workers {
			w.retiring = true
		}
	} else {
		// Same workers, maybe fewer: retire the newest extras. Workers
		// keep their spec; new ones get the new (equivalent) one.
		live := 0
		for _, w := range d.workers {
			if !w.retiring {
				live++
				if live > d.cfg.Workers.Count {
					w.retiring = true
				}
			}
		}
	}
	d.roll(now)
	d.pump(nil, now)
	d.log.Info("reloaded", "workers", d.cfg.Workers.Count, "pool", d.pool, "share", d.share)
	m.reply <- nil
}

// reloadListeners closes the listeners the new configuration dropped and
// arms the ones bound for it.
func (d *dispatcher) reloadListeners(added []listener) {
	var keep []listener
	for _, l := range d.listeners {
		if slices.ContainsFunc(d.cfg.Listeners, func(c config.Listener) bool { return c.Address == l.cfgAddr }) {
			keep = append(keep, l)
			continue
		}
		if d.acceptArmed {
			d.del(l.fd)
		}
		unix.Close(l.fd)
		d.log.Info("listener closed", "listener", l.name, "address", l.addr)
	}
	d.listeners = keep
	for _, l := range added {
		d.nextListener++
		l.id = d.nextListener
		d.listeners = append(d.listeners, l)
		if d.acceptArmed {
			if err := d.add(l.fd, kindListener, l.id, poll.In); err != nil {
				d.log.Error("arming listener", "listener", l.name, "error", err)
			}
		}
		d.log.Info("listening", "listener", l.name, "address", l.addr)
	}
	d.s.publishListeners(d.listeners)
}

// workerView is what a worker is started with: a change in any of it needs
// new workers.
type workerView struct {
	Routes      []config.Route
	Concurrency int
	MaxInFlight int // the worker bounds its requests by the cap it was given
	Rounds      int64
	IdleTLS     int
	Threads     int
	Body        int64
	Write       time.Duration
	Idle        time.Duration
	Sandbox     config.Sandbox
	User        string
	CORS        *config.CORS
	Log         config.Log
	BaseDir     string
	Listeners   []listenerAnswers
	ErrorPages  []config.ErrorPage
}

// listenerAnswers is what a worker adds to the answers on a listener.
type listenerAnswers struct {
	Name     string
	HSTS     *config.HSTS
	Redirect *config.HTTPSRedirect
	Headers  []config.HeaderRules
}

func viewOf(c *config.Config) workerView {
	return workerView{
		Routes: c.Routes, Concurrency: c.Workers.Concurrency, MaxInFlight: c.Limits.IPCMaxInFlightRequests, Rounds: c.Workers.MaxRoundsPerWorker,
		IdleTLS: c.Workers.TLSMaxIdleSessions, Threads: c.Workers.Threads,
		Body: c.Limits.MaxBodyBytes, Write: c.Limits.WriteTimeout, Idle: c.Limits.KeepAliveIdleTimeout,
		Sandbox: c.Sandbox, User: c.User, CORS: c.CORS, Log: c.Log, BaseDir: c.BaseDir,
		Listeners: answersOf(c), ErrorPages: c.ErrorPages,
	}
}

func answersOf(c *config.Config) []listenerAnswers {
	var a []listenerAnswers
	for _, l := range c.Listeners {
		if l.HSTS != nil || l.HTTPSRedirect != nil || l.Headers != nil {
			a = append(a, listenerAnswers{Name: l.Name, HSTS: l.HSTS, Redirect: l.HTTPSRedirect, Headers: l.Headers})
		}
	}
	return a
}

func workersNeedReplacing(a, b *config.Config) bool {
	return !reflect.DeepEqual(viewOf(a), viewOf(b))
}

// sameCluster reports whether two cluster blocks are the same (both nil:
// no store).
func sameCluster(a, b *config.Cluster) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}
