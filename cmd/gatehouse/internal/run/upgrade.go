package run

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/internal/version"
	"github.com/gatehouse-dev/gatehouse/supervisor"
	"github.com/gatehouse-dev/gatehouse/supervisor/handover"
	"github.com/gatehouse-dev/gatehouse/supervisor/launcher"
	"github.com/gatehouse-dev/gatehouse/supervisor/sockets"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// upgradeReadyTimeout bounds the new binary's start: its configuration
// read, its listeners and workers ready (docs/DESIGN.md §11).
const upgradeReadyTimeout = 30 * time.Second

// upgrade starts the binary at path ("": the one gatehouse was started
// from) with the configuration file read afresh, and once its workers are
// ready hands it every listener and every connection that can move. An
// error leaves this supervisor serving as before.
func (s *service) upgrade(ctx context.Context, path string) (string, error) {
	if !s.upgradeMu.TryLock() {
		return "", errors.New("an upgrade is already under way")
	}
	defer s.upgradeMu.Unlock()
	if s.handedOver.Load() {
		return "", errors.New("this gatehouse has handed over already; ask the new one")
	}
	if path == "" {
		path = s.exe
	}
	if s.launcher != nil && filepath.Clean(path) != s.exe {
		err := fmt.Errorf("gatehouse was started as root: it upgrades only to the binary at the path it was started from, %s, which its root launcher runs; install the new binary there and run gatehousectl upgrade without a PATH", s.exe)
		s.log.Error("upgrade refused", "binary", path, "error", err)
		s.sup.UpgradeFailed(err.Error())
		return "", err
	}
	msg, err := s.startNew(ctx, path)
	if err != nil {
		s.log.Error("upgrade failed; serving on", "binary", path, "error", err)
		s.sup.UpgradeFailed(err.Error())
		return "", err
	}
	return msg, nil
}

// upgradeLogged is SIGUSR2's upgrade, whose outcome only the log tells.
func (s *service) upgradeLogged(ctx context.Context) {
	if msg, err := s.upgrade(ctx, ""); err == nil {
		s.log.Info(msg)
	}
}

func (s *service) startNew(ctx context.Context, path string) (string, error) {
	ls, err := s.sup.ListenerFDs(ctx)
	if err != nil {
		return "", err
	}
	defer func() {
		for _, l := range ls {
			syscall.Close(l.FD)
		}
	}()
	adminFD := -1
	if s.adm != nil {
		fd, err := s.adm.Dup()
		if err != nil {
			return "", fmt.Errorf("passing the admin socket: %w", err)
		}
		defer syscall.Close(fd)
		adminFD = fd
	}
	args := []string{"-upgrade-fd", "3"}
	if s.config != "" {
		args = append(args, "-config", s.config)
	}
	s.log.Info("upgrading", "binary", path, "config", s.config)
	s.sup.UpgradeStarting(path)
	start := handover.Start{Path: path, Args: args, Env: s.upgradeEnv(), Listeners: ls, AdminFD: adminFD,
		Version: version.Version, Timeout: upgradeReadyTimeout, Log: s.log.Named("handover")}
	if s.launcher != nil {
		// Started as root: the launcher runs the binary as root, with the
		// arguments and environment it recorded at start, so that the new
		// gatehouse drops privileges as a fresh start does.
		start.Launch = func(f *os.File) (handover.Launched, error) {
			_, exited, err := s.launcher.Launch(f)
			return handover.Launched{Exited: exited, Kill: s.launcher.Kill}, err
		}
	}
	out, err := handover.Begin(ctx, start)
	if err != nil {
		return "", err
	}
	// This process is still the service's main one: it names the new one
	// (NotifyAccess=main accepts MAINPID= from it alone), then stays quiet.
	s.handedOver.Store(true)
	s.out = out
	s.notify.send("MAINPID=" + strconv.Itoa(out.PID))
	s.notify.quiet.Store(true)
	if s.adm != nil {
		s.adm.Detach()
	}
	s.sup.HandOver(out)
	return fmt.Sprintf("upgraded: gatehouse %s (pid %d) serves now; gatehouse %s (pid %d) hands over its connections and exits, at the latest upgrade_grace from now",
		out.Version, out.PID, version.Version, os.Getpid()), nil
}

// startLauncher starts the upgrade launcher of a gatehouse started as root
// (before the supervisor drops it), with the binary path, configuration
// path and environment a fresh start has.
func (s *service) startLauncher() error {
	if !launcher.Supported || os.Geteuid() != 0 || s.exe == "" {
		return nil
	}
	// Nothing inherited (socket-activated listeners, the hand-over
	// socket) may reach the launcher or what it starts.
	if err := sockets.CloseOnExecInherited(); err != nil {
		return err
	}
	l, err := launcher.Start(launcher.Options{Self: "/proc/self/exe", Exe: s.exe, Config: s.config, Env: s.upgradeEnv()})
	if err != nil {
		return err
	}
	s.launcher = l
	s.log.Info("upgrade launcher started", "pid", l.PID(), "binary", s.exe)
	return nil
}

// upgradeEnv is the new binary's environment: this one's, without what the
// init system meant for this process alone, and with the watchdog interval
// it unset at start (the new process pings it once it is the main one).
func (s *service) upgradeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "LISTEN_") || strings.HasPrefix(k, "WATCHDOG_") {
			continue
		}
		env = append(env, kv)
	}
	if s.notify.watchdog > 0 {
		env = append(env, "WATCHDOG_USEC="+strconv.FormatInt(s.notify.watchdog.Microseconds(), 10))
	}
	return env
}

// takeListeners returns the inherited listeners that the configuration
// still has (same name, same address), by name, and the admin socket;
// the rest are closed.
func takeListeners(cfg *config.Config, in *handover.Inbound, log hclog.Logger) (map[string]int, *os.File) {
	want := map[string]string{}
	for _, l := range cfg.Listeners {
		want[l.Name] = l.Address.String()
	}
	out := map[string]int{}
	for _, l := range in.Listeners {
		if addr, ok := want[l.Name]; ok && addr == l.Address {
			out[l.Name] = l.FD
			continue
		}
		log.Info("listener not in the new configuration: closed", "listener", l.Name, "address", l.Address)
		syscall.Close(l.FD)
	}
	// The admin socket goes on where the new configuration names the same
	// path it is bound to; elsewhere (or nowhere) the new one is made.
	var adminFile *os.File
	if in.AdminFD >= 0 {
		sa, err := unix.Getsockname(in.AdminFD)
		if ua, ok := sa.(*unix.SockaddrUnix); err == nil && ok && cfg.Admin.Socket != "" && ua.Name == cfg.Admin.Socket {
			adminFile = os.NewFile(uintptr(in.AdminFD), "admin socket")
		} else {
			syscall.Close(in.AdminFD)
		}
	}
	return out, adminFile
}

// takeOver tells the old supervisor, once the workers are ready, to hand
// over, and relays what it sends into the loop. The notifier sees the
// supervisor ready once the old one's bulk has arrived: it then names this
// process the service's main one.
func (s *service) takeOver(sup *supervisor.Supervisor, in *handover.Inbound, done <-chan struct{}) supervised {
	s.notify.mainPID = true
	ready := make(chan struct{})
	var once sync.Once
	go func() {
		select {
		case <-sup.Ready():
		case <-done:
			return
		}
		s.log.Info("taking over", "from_version", in.OldVersion)
		if err := in.Ready(os.Getpid(), version.Version); err != nil {
			s.log.Error("telling the old supervisor", "error", err)
		}
		in.Run(func(m any) {
			sup.Adopt(m)
			switch m.(type) {
			case handover.BulkDone, handover.Closed:
				once.Do(func() { close(ready) })
			}
		})
	}()
	return takenOver{sup, ready}
}

// takenOver is the supervisor as the notifier watches it in a new binary:
// ready once it serves in the old one's place.
type takenOver struct {
	*supervisor.Supervisor
	ready chan struct{}
}

func (t takenOver) Ready() <-chan struct{} { return t.ready }
