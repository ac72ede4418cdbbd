// Package run is the body of the gatehouse command, kept importable so that
// tests can run the real command in a re-executed test binary.
package run

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/internal/version"
	"github.com/gatehouse-dev/gatehouse/spawner"
	"github.com/gatehouse-dev/gatehouse/supervisor"
	"github.com/gatehouse-dev/gatehouse/supervisor/admin"
	"github.com/gatehouse-dev/gatehouse/supervisor/handover"
	"github.com/gatehouse-dev/gatehouse/supervisor/launcher"
	"github.com/gatehouse-dev/gatehouse/supervisor/logrelay"
	"github.com/gatehouse-dev/gatehouse/supervisor/secrets"
	"github.com/gatehouse-dev/gatehouse/supervisor/sockets"
	"github.com/gatehouse-dev/gatehouse/worker"
	"github.com/hashicorp/go-hclog"
)

// Exit statuses, distinct so that an init system or a script can tell why
// gatehouse stopped. A unit's RestartPreventExitStatus=2 keeps systemd from
// restarting a service whose configuration is broken.
const (
	ExitOK     = 0 // stopped by SIGTERM, SIGINT or the admin socket's drain; -check passed
	ExitError  = 1 // a runtime failure
	ExitConfig = 2 // invalid flags or configuration
	// ExitBind: a listener could not be bound, an inherited socket (socket
	// activation) was malformed or matched no listener, or the admin socket
	// could not be created.
	ExitBind = 3
)

// Main runs gatehouse with args (without the program name) and returns its
// exit status.
func Main(args []string, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "worker" {
		return worker.Main(args[1:])
	}
	if len(args) > 0 && args[0] == spawner.Arg {
		return spawner.Main()
	}
	if len(args) > 0 && args[0] == launcher.Arg {
		return launcher.Main()
	}
	fs := flag.NewFlagSet("gatehouse", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "configuration `file` (default: the embedded example configuration)")
	check := fs.Bool("check", false, "validate the configuration and exit")
	showVersion := fs.Bool("version", false, "print the version and exit")
	upgradeFD := fs.Int("upgrade-fd", 0, "internal: the hand-over `descriptor` from the gatehouse this one upgrades (gatehousectl upgrade)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK // -h asked for the usage, which is printed
		}
		return ExitConfig
	}
	if *showVersion {
		fmt.Fprintf(stderr, "gatehouse %s\n", version.Version)
		return ExitOK
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gatehouse: unexpected argument %q\n", fs.Arg(0))
		return ExitConfig
	}
	// The path this binary was started from, while it is still this
	// binary: an upgrade replaces the file, and /proc/self/exe then names
	// the old one, deleted.
	exe, _ := os.Executable()
	var in *handover.Inbound
	if *upgradeFD > 0 {
		var err error
		if in, err = handover.Open(*upgradeFD); err != nil {
			fmt.Fprintf(stderr, "gatehouse: taking over: %v\n", err)
			return ExitError
		}
	}
	var cfg *config.Config
	var err error
	if *path == "" {
		cfg, err = config.Default()
	} else {
		// The TLS keys as the account that reads them again on every
		// reload: the supervisor's, once it dropped privileges.
		cfg, err = config.LoadWith(*path, config.ParseOptions{KeysAsUser: true})
	}
	if err != nil {
		fmt.Fprintf(stderr, "gatehouse: %v\n", err)
		if in != nil {
			in.Fail("configuration: " + err.Error())
		}
		if !*check && in == nil {
			// A service manager shows why the unit never became ready.
			log := hclog.New(&hclog.LoggerOptions{Name: "gatehouse", Output: stderr})
			newNotifier(log).status(failedStatus(err))
		}
		return ExitConfig
	}
	if *check {
		for _, w := range cfg.Warnings {
			fmt.Fprintf(stderr, "gatehouse: %s\n", w)
		}
		fmt.Fprintf(stderr, "gatehouse: configuration %s is valid\n", cfg.Filename)
		return ExitOK
	}
	// Logged through a bounded queue: a slow or stopped reader of standard
	// error never holds the dispatcher loop (docs/DESIGN.md §6.4).
	var log hclog.Logger
	out := logrelay.NewLogWriter(stderr, func(dropped uint64) {
		log.Warn("log lines dropped: standard error was not read fast enough", "dropped", dropped)
	})
	log = hclog.New(&hclog.LoggerOptions{
		Name:       "gatehouse",
		Level:      hclog.LevelFromString(cfg.Log.Level),
		JSONFormat: cfg.Log.Format == "json",
		Output:     out,
	})
	for _, w := range cfg.Warnings {
		log.Warn("configuration", "warning", w)
	}
	code := serve(cfg, *path, log, out, exe, in)
	out.Flush(2 * time.Second)
	return code
}

// serve runs the supervisor for cfg until a signal or a drain, and returns the
// exit status.
func serve(cfg *config.Config, path string, log hclog.Logger, out *logrelay.LogWriter, exe string, in *handover.Inbound) int {
	svc := &service{notify: newNotifier(log), log: log, grace: cfg.Limits.ShutdownGrace, exe: exe, config: path}
	// fail reports a startup failure in the log and on the STATUS= line;
	// READY=1 is never sent. A new binary taking over tells the old one,
	// which keeps serving.
	fail := func(code int, err error) int {
		log.Error("starting", "error", err)
		if in != nil {
			in.Fail(err.Error())
			return code
		}
		svc.notify.status(failedStatus(err))
		return code
	}
	// Socket activation: the init system's sockets replace the bindings of
	// the listeners they match. ListenFDs unsets LISTEN_* either way.
	socks, err := sockets.ListenFDs()
	if err != nil {
		return fail(ExitBind, err)
	}
	inherited, err := sockets.MatchInherited(cfg, socks, log)
	if err != nil {
		return fail(ExitBind, err)
	}
	var adminFile *os.File
	if in != nil {
		inherited, adminFile = takeListeners(cfg, in, log)
	}
	// The admin socket is created before New, which may drop privileges to
	// the configured user; it is served once the supervisor exists.
	var adm *admin.Server
	if cfg.Admin.Socket != "" {
		adm, err = admin.Listen(admin.Options{Path: cfg.Admin.Socket, Logger: log, Reload: svc.reload, Drain: svc.drain,
			Upgrade: svc.upgrade, Inherited: adminFile})
		if err != nil {
			for _, fd := range inherited {
				syscall.Close(fd)
			}
			return fail(ExitBind, err)
		}
		defer adm.Close()
	}
	if err := svc.startLauncher(); err != nil {
		return fail(ExitError, err)
	}
	launcherPID := 0
	if svc.launcher != nil {
		launcherPID = svc.launcher.PID()
	}
	sup, err := supervisor.New(cfg, supervisor.Options{LauncherPID: launcherPID, Logger: log, LogOutput: out, ConfigPath: path, Inherited: inherited, HoldAccept: in != nil})
	if err != nil {
		switch {
		case errors.Is(err, supervisor.ErrBind):
			return fail(ExitBind, err)
		case errors.Is(err, secrets.ErrCertificates), errors.Is(err, supervisor.ErrHelloTooLarge):
			return fail(ExitConfig, err)
		}
		return fail(ExitError, err)
	}
	svc.sup, svc.adm = sup, adm
	for i, a := range sup.Addrs() {
		if fd, ok := inherited[cfg.Listeners[i].Name]; ok {
			log.Info("listening", "address", a.String(), "listener", cfg.Listeners[i].Name, "inherited_fd", fd)
		} else {
			log.Info("listening", "address", a.String(), "listener", cfg.Listeners[i].Name)
		}
	}
	done := make(chan struct{})
	defer close(done)
	var watched supervised = sup
	if in != nil {
		watched = svc.takeOver(sup, in, done)
	}
	if adm != nil {
		go func() {
			if in != nil {
				// The old gatehouse answers on the shared socket until
				// this one serves in its place.
				select {
				case <-watched.Ready():
				case <-done:
					return
				}
			}
			if err := adm.Serve(sup.Admin()); err != nil {
				log.Error("admin socket stopped", "error", err)
			}
		}()
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)
	go func() {
		for {
			select {
			case sig := <-sigs:
				if sig == syscall.SIGHUP {
					// Errors are logged by Reload; the running configuration
					// stays. Off this goroutine, so that a SIGTERM during a
					// reload is not kept waiting.
					go svc.reload(ctx)
					continue
				}
				if sig == syscall.SIGUSR2 {
					// As nginx: upgrade to the binary at the path
					// gatehouse was started from.
					go svc.upgradeLogged(ctx)
					continue
				}
				if sig == syscall.SIGUSR1 {
					// Reopen the access log (logrotate); errors are logged.
					go sup.ReopenAccessLog()
					continue
				}
				if ctx.Err() == nil {
					log.Info("stopping", "signal", sig.String())
					svc.stopping(sig.String())
					cancel()
				}
			case <-done:
				return
			}
		}
	}()
	go svc.notify.watch(done, watched, &svc.started)

	if err := sup.Run(ctx); err != nil {
		log.Error("stopped", "error", err)
		return ExitError
	}
	if svc.handedOver.Load() {
		// The last connections handed over may still be on their way.
		svc.out.Wait()
		log.Info("upgraded: the new supervisor serves; exiting")
	}
	return ExitOK
}

// failedStatus is the STATUS= line of a gatehouse that could not start.
func failedStatus(err error) string { return "failed to start: " + oneLine(err.Error()) }

// service ties the supervisor to the init system: the notifications around
// reloads and stops.
type service struct {
	sup    *supervisor.Supervisor // set once New succeeded, before any use
	notify *notifier
	log    hclog.Logger
	grace  time.Duration
	// started is set once READY=1 was sent.
	started  atomic.Bool
	reloadMu sync.Mutex // one reload at a time: SIGHUP and the admin socket
	// exe and config are the binary and the file an upgrade starts by
	// default (exe as it was resolved at start).
	exe, config string
	adm         *admin.Server // nil without an admin socket
	// launcher starts an upgrade's binary as root; nil unless gatehouse
	// was started as root.
	launcher  *launcher.Client
	upgradeMu sync.Mutex // one upgrade at a time
	// handedOver is set once a new supervisor took over: this one only
	// finishes what cannot move, then exits.
	handedOver atomic.Bool
	out        *handover.Outbound // set with handedOver
}

// reload reloads the configuration (SIGHUP, admin reload), with RELOADING=1
// before and READY=1 after. Before the first READY=1 it tells the service
// manager nothing: that would announce readiness early.
func (s *service) reload(ctx context.Context) error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	if s.handedOver.Load() {
		return errors.New("this gatehouse has handed over to a new binary; reload that one")
	}
	if !s.started.Load() {
		return s.sup.Reload(ctx)
	}
	s.notify.reloading("reloading the configuration")
	err := s.sup.Reload(ctx)
	status := "configuration reloaded"
	if snap, serr := snapshot(s.sup, 5*time.Second); serr == nil {
		status = statusLine(snap)
	}
	if err != nil {
		status = "reload failed, serving with the previous configuration: " + oneLine(err.Error())
	}
	s.notify.ready(status)
	return err
}

// stopping sends STOPPING=1.
func (s *service) stopping(why string) {
	s.notify.stopping(fmt.Sprintf("stopping (%s): finishing in-flight requests within %v", why, s.grace))
}

// drain is the admin socket's drain.
func (s *service) drain() {
	s.log.Info("draining on request of the admin socket: no new connections, requests in flight get shutdown_grace, then are cut",
		"shutdown_grace", s.grace)
	s.stopping("drain")
	s.sup.Drain()
}
