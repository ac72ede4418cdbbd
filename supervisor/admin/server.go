// Package admin serves gatehouse's admin socket (docs/DESIGN.md §6.3): the
// socket, its peers, the request lines and the commands. What a command
// shows or does it asks of a Supervisor, the narrow interface the
// supervisor implements; it reaches the loop only through it. The wire
// format is adminapi's.
package admin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/adminapi"
	"github.com/hashicorp/go-hclog"
)

const (
	// adminMaxConns bounds the admin connections served at once; one over
	// it gets an error reply and is closed.
	adminMaxConns = 16
	// adminSocketMode is the admin socket's file mode (docs/DESIGN.md §6.3).
	adminSocketMode = 0o600
	// adminReloadTimeout bounds a reload asked on the admin socket.
	adminReloadTimeout = time.Minute
	// adminUpgradeTimeout bounds an upgrade asked on the admin socket: the
	// new binary's start is bounded by less (run's upgradeReadyTimeout).
	adminUpgradeTimeout = time.Minute
)

// ErrBind marks a failure to create the admin socket; cmd/gatehouse maps it
// to its exit code for binding. Its text is the supervisor's ErrBind's, as
// operators have read it since the admin socket was one of its listeners.
var ErrBind = errors.New("supervisor: binding listeners")

// Supervisor is what the admin socket's commands ask of the supervisor.
type Supervisor interface {
	// View asks the loop for a copy of its state, as the commands show it.
	View(ctx context.Context) (View, error)
	// Reload reloads the configuration (the default Options.Reload).
	Reload(ctx context.Context) error
	// CertificateErrors are the TLS certificates the last reload could not
	// load, one line each.
	CertificateErrors() []string
	// Drain stops accepting and makes the supervisor exit once its
	// connections are done (the default Options.Drain).
	Drain()
	// SetLogLevel changes the log level, or says why it cannot.
	SetLogLevel(level string) error
}

// View is one copy of the loop's state, as the commands show it.
type View interface {
	Status() *adminapi.Status
	Workers() []adminapi.Worker
	Conns() *adminapi.Conns
	// Clients are the n client keys that matter most (see adminapi).
	Clients(n int) []adminapi.Client
	Upstreams() []adminapi.Upstream
	// Metrics is the state in Prometheus' text format.
	Metrics() (string, error)
	// ShutdownGrace is what a drain gives requests in flight.
	ShutdownGrace() time.Duration
}

// Options configure an admin socket.
type Options struct {
	// Path is the socket's path (config Admin.Socket).
	Path string
	// Logger receives the admin socket's log. Default: hclog.Default().
	Logger hclog.Logger
	// Reload performs the reload command. Default: the served Supervisor's
	// Reload. The command wraps it to tell the init system.
	Reload func(context.Context) error
	// Drain performs the drain command. Default: the Supervisor's Drain.
	Drain func()
	// Upgrade performs the upgrade command with the new binary's path
	// ("": the one gatehouse was started from) and returns what to tell
	// the operator. Nil: the command is refused.
	Upgrade func(ctx context.Context, path string) (string, error)
	// Inherited is a listening socket at Path that the old supervisor of
	// an upgrade passed on; Listen serves it instead of creating one.
	Inherited *os.File
}

// Server serves the admin socket: one goroutine accepts, one per
// connection (at most adminMaxConns) reads requests and answers them.
// Requests reach the dispatcher only through the Supervisor's methods, like
// any goroutine's.
type Server struct {
	s     Supervisor // set by Serve before any connection is served
	opts  Options    // immutable once Serve starts
	log   hclog.Logger
	ln    *net.UnixListener
	file  os.FileInfo // the socket file created; removed on Close if still there
	self  int         // the effective uid gatehouse had when it created the socket
	slots chan struct{}
	// ctx is cancelled by Close: replies waiting on the loop give up.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // connection goroutines

	// mu guards conns, closed and detached.
	mu     sync.Mutex
	conns  map[*net.UnixConn]struct{}
	closed bool
	// detached: the socket passed to a new supervisor, Close leaves its
	// file.
	detached bool
}

// Listen creates the admin socket at opts.Path with mode 0600, so that
// its errors are startup errors (ErrBind); Serve then answers on it. Call it
// before New: New may drop the supervisor's privileges to the configured
// user, who could neither create the socket in a root-owned directory nor be
// trusted with it. The peers allowed are root and the user gatehouse runs as
// now, never the account it drops to (the workers' account).
//
// A socket file already at the path is removed only when nothing answers on
// it. The directory must exist: root creating it would leave it behind
// (systemd's RuntimeDirectory= or the package creates it).
func Listen(opts Options) (*Server, error) {
	if opts.Logger == nil {
		opts.Logger = hclog.Default()
	}
	fail := func(err error) (*Server, error) {
		return nil, fmt.Errorf("%w: admin socket %s: %w", ErrBind, opts.Path, err)
	}
	var ln *net.UnixListener
	if opts.Inherited != nil {
		l, err := net.FileListener(opts.Inherited)
		opts.Inherited.Close()
		if err != nil {
			return fail(err)
		}
		ul, ok := l.(*net.UnixListener)
		if !ok {
			l.Close()
			return fail(errors.New("the inherited admin socket is not a Unix socket"))
		}
		ln = ul
	} else {
		if err := removeStaleSocket(opts.Path); err != nil {
			return fail(err)
		}
		l, err := listenUnix(opts.Path)
		if err != nil {
			return fail(err)
		}
		ln = l
	}
	fi, err := os.Lstat(opts.Path)
	if err != nil {
		ln.Close()
		return fail(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &Server{
		opts: opts, log: opts.Logger.Named("admin"), ln: ln, file: fi, self: os.Geteuid(),
		slots: make(chan struct{}, adminMaxConns), ctx: ctx, cancel: cancel,
		conns: map[*net.UnixConn]struct{}{},
	}
	a.log.Info("admin socket listening", "path", opts.Path)
	return a, nil
}

// Path is the admin socket's path.
func (a *Server) Path() string { return a.opts.Path }

// Serve answers admin connections about s until Close, then returns nil.
// Call it once.
func (a *Server) Serve(s Supervisor) error {
	a.s = s
	if a.opts.Reload == nil {
		a.opts.Reload = s.Reload
	}
	if a.opts.Drain == nil {
		a.opts.Drain = s.Drain
	}
	for {
		c, err := a.ln.AcceptUnix()
		if err != nil {
			if a.isClosed() || a.isDetached() {
				return nil
			}
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ECONNABORTED) {
				a.log.Warn("accepting an admin connection", "error", err)
				time.Sleep(100 * time.Millisecond)
				continue
			}
			return fmt.Errorf("admin socket: %w", err)
		}
		select {
		case a.slots <- struct{}{}:
		default:
			a.log.Warn("admin connection refused: too many at once", "limit", adminMaxConns)
			a.refuse(c, fmt.Sprintf("too many admin connections (at most %d at once)", adminMaxConns))
			continue
		}
		if !a.track(c) {
			<-a.slots
			c.Close()
			return nil
		}
		a.wg.Add(1)
		go a.serveConn(c)
	}
}

func (a *Server) isDetached() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.detached
}

func (a *Server) isClosed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closed
}

// track records c, or reports false once Close has begun.
func (a *Server) track(c *net.UnixConn) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return false
	}
	a.conns[c] = struct{}{}
	return true
}

// Close stops accepting, ends every connection (a reply being written
// finishes within its deadline), waits for their goroutines and removes the
// socket file if it is still the one Listen created.
func (a *Server) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	detached := a.detached
	err := a.ln.Close()
	a.cancel()
	for c := range a.conns {
		c.SetReadDeadline(time.Now())
	}
	a.mu.Unlock()
	a.wg.Wait()
	if fi, serr := os.Lstat(a.opts.Path); serr == nil && os.SameFile(fi, a.file) && !detached {
		// After New dropped privileges this fails when the directory is
		// not writable by the account dropped to: no descriptor kept from
		// before the drop would let it unlink, and only a privileged
		// process could. The next start replaces a socket nothing answers
		// on, and gatehousectl says so meanwhile.
		if rerr := os.Remove(a.opts.Path); rerr != nil {
			a.log.Info("admin socket file left behind; the next start replaces it "+
				"(a directory the account gatehouse runs as may write, such as systemd's RuntimeDirectory=, lets it remove the file)",
				"path", a.opts.Path, "error", rerr)
		}
	}
	return err
}

// refuse writes one error reply to c and closes it, without blocking for
// long: the accepting goroutine calls it.
func (a *Server) refuse(c *net.UnixConn, msg string) {
	c.SetWriteDeadline(time.Now().Add(time.Second))
	writeReply(c, adminapi.Reply{Error: msg})
	c.Close()
}

// peerAllowed reports whether a peer of effective uid uid may use the admin
// socket of a gatehouse started as self: root, or the same user.
func peerAllowed(uid, self int) bool { return uid == 0 || uid == self }

// serveConn answers one connection's requests until it ends, errs or stalls.
func (a *Server) serveConn(c *net.UnixConn) {
	defer func() {
		if r := recover(); r != nil {
			a.log.Error("admin connection panicked", "error", fmt.Sprint(r))
		}
		a.mu.Lock()
		delete(a.conns, c)
		a.mu.Unlock()
		c.Close()
		<-a.slots
		a.wg.Done()
	}()
	uid, err := peerUID(c)
	if err != nil || !peerAllowed(uid, a.self) {
		if err == nil {
			err = fmt.Errorf("uid %d is neither root nor gatehouse's uid %d", uid, a.self)
		}
		a.log.Warn("admin connection refused", "uid", uid, "error", err)
		c.SetWriteDeadline(time.Now().Add(adminapi.Timeout))
		writeReply(c, adminapi.Reply{Error: "permission denied: " + err.Error()})
		return
	}
	br := bufio.NewReaderSize(c, adminapi.MaxRequest+1)
	for {
		c.SetReadDeadline(time.Now().Add(adminapi.Timeout))
		line, err := br.ReadSlice('\n')
		var reply adminapi.Reply
		last := false
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			reply, last = adminapi.Reply{Error: fmt.Sprintf("request longer than %d bytes", adminapi.MaxRequest)}, true
		case err != nil && len(line) == 0:
			return // closed, or stalled past the deadline
		default:
			// A final line may end at EOF instead of a newline.
			last = err != nil
			var req adminapi.Request
			if err := parseRequest(line, &req); err != nil {
				reply, last = adminapi.Reply{Error: err.Error()}, true
				a.log.Warn("malformed admin request", "uid", uid, "error", err)
			} else {
				reply = a.do(req, uid)
			}
		}
		c.SetWriteDeadline(time.Now().Add(adminapi.Timeout))
		if err := writeReply(c, reply); err != nil || last {
			return
		}
	}
}

// parseRequest decodes one request line: exactly one JSON object with only
// Request's fields and a command.
func parseRequest(line []byte, req *adminapi.Request) error {
	line = bytes.TrimRight(line, "\r\n")
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(req); err != nil {
		return fmt.Errorf("malformed request: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("malformed request: more than one JSON value on the line")
	}
	if req.Command == "" {
		return errors.New("malformed request: no command")
	}
	return nil
}

func writeReply(w io.Writer, r adminapi.Reply) error {
	r.OK = r.Error == ""
	b, err := json.Marshal(r)
	if err != nil {
		b, _ = json.Marshal(adminapi.Reply{Error: "encoding the reply: " + err.Error()})
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// do runs one command.
func (a *Server) do(req adminapi.Request, uid int) adminapi.Reply {
	ctx, cancel := context.WithTimeout(a.ctx, adminapi.Timeout)
	defer cancel()
	noArgs := func() bool { return len(req.Args) == 0 }
	argErr := func(usage string) adminapi.Reply {
		return adminapi.Reply{Error: fmt.Sprintf("usage: %s", usage)}
	}
	switch req.Command {
	case adminapi.CmdStatus, adminapi.CmdWorkers, adminapi.CmdConns, adminapi.CmdMetrics, adminapi.CmdUpstreams:
		if !noArgs() {
			return argErr(req.Command)
		}
		a.log.Debug("admin command", "command", req.Command, "uid", uid)
		v, err := a.s.View(ctx)
		if err != nil {
			return adminapi.Reply{Error: "supervisor did not answer: " + err.Error()}
		}
		switch req.Command {
		case adminapi.CmdStatus:
			return adminapi.Reply{Status: v.Status()}
		case adminapi.CmdWorkers:
			return adminapi.Reply{Workers: v.Workers()}
		case adminapi.CmdConns:
			return adminapi.Reply{Conns: v.Conns()}
		case adminapi.CmdUpstreams:
			return adminapi.Reply{Upstreams: v.Upstreams()}
		default:
			text, err := v.Metrics()
			if err != nil {
				return adminapi.Reply{Error: err.Error()}
			}
			return adminapi.Reply{Metrics: text}
		}
	case adminapi.CmdClients:
		n := adminapi.DefaultClients
		if len(req.Args) > 1 {
			return argErr("clients [N]")
		}
		if len(req.Args) == 1 {
			v, err := strconv.Atoi(req.Args[0])
			if err != nil || v < 1 {
				return argErr("clients [N], N a positive count")
			}
			n = v
		}
		v, err := a.s.View(ctx)
		if err != nil {
			return adminapi.Reply{Error: "supervisor did not answer: " + err.Error()}
		}
		return adminapi.Reply{Clients: v.Clients(n)}
	case adminapi.CmdReload:
		if !noArgs() {
			return argErr("reload")
		}
		a.log.Info("admin command", "command", req.Command, "uid", uid)
		rctx, cancel := context.WithTimeout(a.ctx, adminReloadTimeout)
		defer cancel()
		if err := a.opts.Reload(rctx); err != nil {
			return adminapi.Reply{Error: "reload failed, the running configuration stays: " + err.Error()}
		}
		msg := "configuration reloaded"
		if errs := a.s.CertificateErrors(); len(errs) > 0 {
			msg += fmt.Sprintf("; %d TLS certificate(s) failed to load (gatehousectl status lists them):", len(errs))
			for _, e := range errs {
				msg += " " + e + ";"
			}
		}
		return adminapi.Reply{Message: msg}
	case adminapi.CmdDrain:
		if !noArgs() {
			return argErr("drain")
		}
		a.log.Info("admin command", "command", req.Command, "uid", uid)
		grace := "shutdown_grace"
		if v, err := a.s.View(ctx); err == nil {
			grace = fmt.Sprintf("shutdown_grace (%v)", v.ShutdownGrace())
		}
		a.opts.Drain()
		return adminapi.Reply{Message: "draining: no new connections, idle connections closed; requests in flight get " +
			grace + " to finish, then are cut; gatehouse then exits"}
	case adminapi.CmdUpgrade:
		if len(req.Args) > 1 {
			return argErr("upgrade [PATH]")
		}
		if a.opts.Upgrade == nil {
			return adminapi.Reply{Error: "upgrade is not available in this process"}
		}
		path := ""
		if len(req.Args) == 1 {
			path = req.Args[0]
		}
		a.log.Info("admin command", "command", req.Command, "path", path, "uid", uid)
		uctx, cancel := context.WithTimeout(a.ctx, adminUpgradeTimeout)
		defer cancel()
		msg, err := a.opts.Upgrade(uctx, path)
		if err != nil {
			return adminapi.Reply{Error: "upgrade failed, the running version keeps serving: " + err.Error()}
		}
		return adminapi.Reply{Message: msg}
	case adminapi.CmdLogLevel:
		if len(req.Args) != 1 {
			return argErr("log-level trace|debug|info|warn|error")
		}
		a.log.Info("admin command", "command", req.Command, "level", req.Args[0], "uid", uid)
		if err := a.s.SetLogLevel(req.Args[0]); err != nil {
			return adminapi.Reply{Error: err.Error()}
		}
		return adminapi.Reply{Message: "log level set to " + req.Args[0]}
	}
	a.log.Warn("unknown admin command", "command", req.Command, "uid", uid)
	return adminapi.Reply{Error: fmt.Sprintf("unknown command %q (status, workers, conns, clients, metrics, reload, drain, upgrade, log-level)", req.Command)}
}
