// Package supervisor is gatehouse's privileged process: it owns the listeners,
// the worker processes and the dispatcher, the one event loop (epoll; kqueue
// on the BSDs) that holds every connection nobody is serving and hands
// readable ones to workers (docs/DESIGN.md §2).
//
// The supervisor never reads a request. It accepts, admits, parks, dispatches
// descriptors over each worker's channel and takes them back; everything a
// worker sends it is checked as hostile input.
package supervisor

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/internal/memtrim"
	"github.com/gatehouse-dev/gatehouse/sandbox"
	"github.com/gatehouse-dev/gatehouse/spawner"
	"github.com/gatehouse-dev/gatehouse/supervisor/internal/poll"
	"github.com/gatehouse-dev/gatehouse/supervisor/logrelay"
	"github.com/gatehouse-dev/gatehouse/supervisor/privileges"
	"github.com/gatehouse-dev/gatehouse/supervisor/roots"
	"github.com/gatehouse-dev/gatehouse/supervisor/secrets"
	"github.com/gatehouse-dev/gatehouse/supervisor/sockets"
	"github.com/gatehouse-dev/gatehouse/supervisor/spawn"
	"github.com/gatehouse-dev/gatehouse/supervisor/upstream"
	"github.com/gatehouse-dev/gatehouse/supervisor/view"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// ErrSandbox marks a sandbox that cannot be arranged in strict mode.
var ErrSandbox = errors.New("supervisor: sandbox")

// Options are the parts of a Supervisor that do not come from the file.
type Options struct {
	// Logger receives the supervisor's and the workers' logs. Default: hclog.Default().
	Logger hclog.Logger
	// LogOutput, if not nil, is the Logger's output, whose dropped lines
	// the metrics report.
	LogOutput *logrelay.LogWriter
	// WorkerPath is the program run as a worker. Default: /proc/self/exe,
	// this executable, which the workers' unprivileged account can exec even
	// when it cannot search the directories that lead to it.
	WorkerPath string
	// WorkerArgs are its arguments. Default: ["worker"].
	WorkerArgs []string
	// Handlers are the names of the embedded handlers the worker program
	// serves (worker.Options.Handlers), against which Reload checks the
	// file's embedded blocks, as the caller's config.LoadWith did at start.
	Handlers []string
	// AuthorizesUploads: the worker program authorizes large uploads
	// itself (config.ParseOptions.AuthorizesUploads), for Reload as for
	// the caller's load at start.
	AuthorizesUploads bool
	// SpawnerArgs run WorkerPath as the spawner (see package spawner) that
	// a supervisor started as root leaves the workers' creation to.
	// Default: ["spawner"].
	SpawnerArgs []string
	// KeepRoot leaves a supervisor started as root as root (no_new_privs
	// only), spawning its workers itself: for tests that run it inside
	// their own process, and embedding programs that drop privileges their
	// own way. It is logged as a warning.
	KeepRoot bool
	// LauncherPID is the upgrade launcher a root start keeps (package
	// launcher, started by the command), for the status; 0: none.
	LauncherPID int
	// ConfigPath is the file Reload reads again; "" when the configuration
	// is the built-in one, which cannot be reloaded.
	ConfigPath string
	// Inherited maps a listener's name to a listening socket received from
	// the init system (socket activation; see ListenFDs and MatchInherited).
	// New adopts it instead of binding the listener's address, and takes
	// ownership of every descriptor in it, also when it fails. A name no
	// listener has is an error (ErrBind).
	Inherited map[string]int
	// HoldAccept leaves the listeners unarmed until the old supervisor of
	// an upgrade has handed over its connections (Adopt).
	HoldAccept bool
}

// Supervisor runs gatehouse. Create it with New, then call Run once.
type Supervisor struct {
	opts  Options // immutable
	log   hclog.Logger
	start time.Time // immutable

	// Set by New, immutable afterwards (see privileges.Drop): the spawner
	// that starts workers (nil: the supervisor starts them itself), the
	// workers' account ("" when not started as root), the supervisor's
	// own account (which reads the certificate files on every reload),
	// whether workers share the supervisor's uid (started unprivileged),
	// and what the workers' separation rests on, for the status.
	spawner       *spawner.Client
	workerAccount string
	account       sandbox.Account
	sharedUID     bool
	separation    string

	reloadMu sync.Mutex // serialises Reload and ReopenAccessLog
	// heldRoots are the static roots' directories (O_PATH) by path, opened
	// at start and kept for a reload that can no longer open them; nil
	// where workers open their roots by path.
	// +checklocks:reloadMu
	heldRoots *roots.Held
	// accessLog is the running configuration's log block, which
	// ReopenAccessLog opens again. +checklocks:reloadMu
	accessLog config.Log
	// access is the access log's destination, which every worker's relay
	// writes to; accessRelays counts the relays running.
	access       *logrelay.Sink
	accessRelays sync.WaitGroup
	// keys are the running TLS certificates and keys, which a reload
	// keeps for a certificate that fails to load. +checklocks:reloadMu
	keys *secrets.Ring

	// boot is what New prepared for the loop: the configuration, the worker
	// spec and the bound listeners. Run hands it to the loop, which from
	// then on is their only owner.
	boot loopInit
	// bound is the listeners' addresses as the loop last published them;
	// Addrs and Reload read it without asking the loop.
	bound atomic.Pointer[[]boundAddr]

	// logDropped counts worker output lines the relays dropped over their
	// rate limit (docs/DESIGN.md §6.4); every relay goroutine adds to it.
	logDropped atomic.Uint64

	msgs   chan any     // bounded queue of messages into the loop
	poller *poll.Poller // the loop's; Wake is safe from any goroutine
	ready  chan struct{}
	once   sync.Once

	d *dispatcher // the loop's state; touched only by the loop goroutine

	// spawn starts a worker process for a slot on its own goroutine and
	// posts its start and exit (spawnWorker; a test's fake worker).
	spawn func(slot int, gen uint64, spec *workerSpec)
	// now is the loop's clock (time.Now; a test's fake clock).
	now func() time.Time
}

// loopInit is the state New prepares for the loop.
type loopInit struct {
	cfg       *config.Config
	spec      *workerSpec
	listeners []listener
	keys      *secrets.Ring
	// resolved is what the upstreams' host names resolved to.
	resolved upstream.Resolved
}

// boundAddr is one listener's address as configured and as bound.
type boundAddr struct {
	cfg, bound netip.AddrPort
}

// publishListeners records the addresses of ls for Addrs and Reload. The
// loop calls it whenever its listeners change.
func (s *Supervisor) publishListeners(ls []listener) {
	b := make([]boundAddr, len(ls))
	for i, l := range ls {
		b[i] = boundAddr{cfg: l.cfgAddr, bound: l.addr}
	}
	s.bound.Store(&b)
}

// New binds every listener of cfg and prepares the supervisor. Binding here,
// before any worker exists, lets the caller tell a bind failure (ErrBind) from
// everything later.
func New(cfg *config.Config, opts Options) (*Supervisor, error) {
	if opts.Logger == nil {
		opts.Logger = hclog.Default()
	}
	if opts.WorkerPath == "" {
		opts.WorkerPath = "/proc/self/exe"
	}
	if err := sockets.CloseOnExecInherited(); err != nil {
		sockets.CloseInherited(opts.Inherited)
		return nil, fmt.Errorf("marking inherited descriptors close-on-exec: %w", err)
	}
	s := newSupervisor(cfg, opts)
	var err error
	if s.boot.listeners, err = openListeners(cfg, opts.Inherited); err != nil {
		return nil, err
	}
	s.publishListeners(s.boot.listeners)
	// Opened before privileges drop, as the listeners: the log's directory
	// may be writable by root only. Reopening needs the file to be
	// writable by the configured user (logrotate's create mode and owner).
	accessFD, created, err := logrelay.Open(cfg.Log)
	if err != nil {
		s.closeListeners()
		return nil, err
	}
	s.access.Start(accessFD, created)
	// Read while the files may still be readable by root only; workers
	// never can read them (docs/DESIGN.md §9).
	if s.boot.keys, err = secrets.Load(cfg); err != nil {
		s.closeEarly()
		return nil, err
	}
	s.keys = s.boot.keys
	if err = checkHello(cfg, s.keys); err != nil {
		s.closeEarly()
		return nil, err
	}
	// Opened as the listeners: the workers' account, and the supervisor's
	// once privileges drop, may not search the directories above a root.
	if s.heldRoots, err = roots.Open(cfg); err != nil {
		s.closeEarly()
		return nil, err
	}
	// With the listeners bound, the supervisor keeps no privilege it does
	// not need (docs/DESIGN.md §1).
	dropped, err := privileges.Drop(cfg, privileges.Options{Log: s.log, KeepRoot: s.opts.KeepRoot, WorkerPath: s.opts.WorkerPath, SpawnerArgs: s.spawnerArgs(),
		Adopt: func(sup sandbox.Account) error { return s.access.Adopt(sup, cfg.Log.AccessLogPath) }})
	s.spawner, s.workerAccount, s.account, s.sharedUID, s.separation = dropped.Spawner, dropped.WorkerAccount, dropped.Account, dropped.SharedUID, dropped.Separation
	if err != nil {
		s.closeEarly()
		return nil, fmt.Errorf("dropping privileges: %w", err)
	}
	s.reloadMu.Lock()
	s.boot.spec, err = s.newWorkerSpec(cfg)
	if err == nil {
		err = s.heldRoots.Keep(s.boot.spec.roots, s.boot.spec.rootPaths)
	}
	s.reloadMu.Unlock()
	if err != nil {
		s.closeEarly()
		return nil, err
	}
	// Resolved as the account the supervisor serves as, which reads
	// /etc/hosts and /etc/resolv.conf at every reload too. A name that
	// does not resolve fails the start, as a wrong address would.
	if s.boot.resolved, err = upstream.Resolve(context.Background(), cfg.Upstreams); err != nil {
		s.closeEarly()
		return nil, err
	}
	if s.poller, err = poll.New(); err != nil {
		s.closeEarly()
		return nil, err
	}
	return s, nil
}

// closeEarly closes what New opened, when it fails after opening the access
// log.
func (s *Supervisor) closeEarly() {
	s.closeListeners()
	if s.spawner != nil {
		s.spawner.Close()
	}
	s.access.Close()
	s.reloadMu.Lock()
	s.heldRoots.Close()
	s.heldRoots = nil
	s.reloadMu.Unlock()
}

// newSupervisor makes the handle, with nothing bound or started yet.
func newSupervisor(cfg *config.Config, opts Options) *Supervisor {
	s := &Supervisor{
		boot:      loopInit{cfg: cfg},
		accessLog: cfg.Log,
		access:    logrelay.NewSink(opts.Logger),
		opts:      opts,
		log:       opts.Logger,
		msgs:      make(chan any, 1024),
		ready:     make(chan struct{}),
		start:     time.Now(),
		now:       time.Now,
	}
	s.spawn = s.spawnWorker
	return s
}

func (s *Supervisor) closeListeners() {
	for _, l := range s.boot.listeners {
		unix.Close(l.fd)
	}
	s.boot.listeners = nil
}

// Addrs returns the bound listener addresses, in configuration order (those
// a reload added last). Safe from any goroutine.
func (s *Supervisor) Addrs() []netip.AddrPort {
	b := *s.bound.Load()
	out := make([]netip.AddrPort, len(b))
	for i, l := range b {
		out[i] = l.bound
	}
	return out
}

// Ready is closed once the listeners are bound and every worker has reported
// Ready for the first time.
func (s *Supervisor) Ready() <-chan struct{} { return s.ready }

// Run serves until ctx is cancelled, then shuts down within shutdown_grace
// (docs/DESIGN.md §2.11) and returns. It must be called once.
func (s *Supervisor) Run(ctx context.Context) error {
	d, err := newDispatcher(s)
	if err != nil {
		return err
	}
	s.d = d
	stop := context.AfterFunc(ctx, func() { s.post(stopMsg{}) })
	defer stop()
	// Off the dispatcher's thread: after a burst, the records and frames it
	// left behind go back to the system once the process is quiet.
	trim, stopTrim := context.WithCancel(context.Background())
	go memtrim.Run(trim, memtrim.Default, nil)
	err = d.run()
	d.signPool.Stop()
	stopTrim()
	if s.spawner != nil {
		s.spawner.Close() // every worker has been reaped, or is killed now
	}
	s.waitAccessRelays()
	s.access.Close()
	return err
}

// post hands a message to the loop and wakes it. It blocks while the queue is
// full; the loop itself never calls it.
func (s *Supervisor) post(m any) {
	s.msgs <- m
	s.wake()
}

func (s *Supervisor) wake() { s.poller.Wake() }

// Snapshot asks the loop for a copy of its state.
func (s *Supervisor) Snapshot(ctx context.Context) (view.Snapshot, error) {
	reply := make(chan view.Snapshot, 1)
	select {
	case s.msgs <- snapshotReq{reply: reply}:
		s.wake()
	case <-ctx.Done():
		return view.Snapshot{}, ctx.Err()
	}
	select {
	case snap := <-reply:
		snap.SortClients()
		return snap, nil
	case <-ctx.Done():
		return view.Snapshot{}, ctx.Err()
	}
}

// newWorkerSpec derives the workers' spec from cfg. The namespaces are
// probed here; in strict mode a missing one is an error (ErrSandbox).
// +checklocks:s.reloadMu
func (s *Supervisor) newWorkerSpec(cfg *config.Config) (*workerSpec, error) {
	opts := s.opts
	args := append([]string(nil), opts.WorkerArgs...)
	if opts.WorkerArgs == nil {
		args = []string{"worker"}
	}
	policy, err := sandboxPolicy(cfg, s.workerAccount)
	if err != nil {
		return nil, err
	}
	rootFiles, err := s.heldRoots.Files(policy.Roots, s.account)
	if err != nil {
		return nil, err
	}
	if rootFiles != nil {
		policy = policy.WithRootFDs(policy.Roots, spawner.RootFDs(len(rootFiles)))
		if err := policy.Validate(); err != nil {
			return nil, err
		}
	}
	var attr *syscall.SysProcAttr
	var missing []sandbox.Layer
	if s.spawner != nil {
		// The spawner creates the namespaces, as the workers' account.
		var flags uint64
		flags, missing, err = s.spawner.Check(append(args, policy.Args()...))
		attr = spawn.AttrWithCloneflags(flags)
	} else {
		attr, missing, err = sandbox.SpawnAttr(policy)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSandbox, err)
	}
	if s.sharedUID && !spawn.SeparatesProcesses(attr) {
		return nil, fmt.Errorf("%w: started unprivileged without user and pid namespaces: a worker would run as the supervisor's uid and could signal or trace it; start gatehouse as root (it drops to user and runs workers as worker_user)", ErrSandbox)
	}
	for _, l := range missing {
		opts.Logger.Warn("sandbox layer not applied; running best-effort", "layer", l.Name, "detail", l.Detail)
	}
	return &workerSpec{cfg: cfg, args: append(args, policy.Args()...), attr: attr, layers: spawn.Layers(attr, missing),
		roots: rootFiles, rootPaths: policy.Roots}, nil
}

// spawnWorker starts one worker process of spec for slot's generation gen
// and waits for it, on the calling goroutine (spawn.Starter.Run).
func (s *Supervisor) spawnWorker(slot int, gen uint64, spec *workerSpec) {
	attr := *spec.attr // a copy per process
	st := spawn.Starter{Path: s.opts.WorkerPath, Spawner: s.spawner, SpawnerArgs: s.spawnerArgs(), Log: s.log, Dropped: &s.logDropped, Post: s.post}
	st.Run(slot, gen, spawn.Command{Args: spec.args, Attr: &attr, Roots: spec.roots})
}

// spawnerArgs run WorkerPath as the spawner (Options.SpawnerArgs).
func (s *Supervisor) spawnerArgs() []string {
	if s.opts.SpawnerArgs == nil {
		return []string{spawner.Arg}
	}
	return s.opts.SpawnerArgs
}

// sandboxPolicy derives the workers' sandbox from the configuration: the
// static roots are their only readable files. worker is the workers'
// account ("" where the supervisor is not root).
func sandboxPolicy(cfg *config.Config, worker string) (sandbox.Policy, error) {
	mode, err := sandbox.ParseMode(cfg.Sandbox.Mode)
	if err != nil {
		return sandbox.Policy{}, err
	}
	action, err := sandbox.ParseSeccompAction(cfg.Sandbox.SeccompAction)
	if err != nil {
		return sandbox.Policy{}, err
	}
	p := sandbox.Policy{Mode: mode, SeccompAction: action, Roots: roots.Paths(cfg), User: worker, Chroot: cfg.Sandbox.Chroot}
	return p, p.Validate()
}

type stopMsg struct{}

type snapshotReq struct{ reply chan view.Snapshot }

// loopFunc runs on the loop between two of its steps: how tests inspect the
// loop's state (its invariants) without a lock.
type loopFunc func(*dispatcher)

// Drain stops accepting, lets the workers finish their rounds (within
// shutdown_grace) and makes Run return: the admin socket's drain.
func (s *Supervisor) Drain() { s.post(stopMsg{}) }

// SetLogLevel changes the log level at once: the supervisor's, and so the
// level at which workers' lines are relayed.
func (s *Supervisor) SetLogLevel(level string) error {
	l := hclog.LevelFromString(level)
	if l == hclog.NoLevel {
		return fmt.Errorf("supervisor: unknown log level %q (trace, debug, info, warn, error)", level)
	}
	s.log.SetLevel(l)
	s.post(logLevelMsg{level: level})
	return nil
}

// logLevelMsg carries a new log level to the workers.
type logLevelMsg struct{ level string }

// Started is when New ran.
func (s *Supervisor) Started() time.Time { return s.start }

// ConfigPath is the configuration file, or "" for the built-in one.
func (s *Supervisor) ConfigPath() string { return s.opts.ConfigPath }
