package run

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/gatehouse-dev/gatehouse/supervisor/view"
	"github.com/hashicorp/go-hclog"
)

// statusInterval is how often the STATUS= line is refreshed (when it changed).
const statusInterval = 5 * time.Second

// notifier speaks the sd_notify protocol (sd_notify(3)) to the service
// manager named by NOTIFY_SOCKET; without it every call is a no-op. The
// workers never see NOTIFY_SOCKET: they run with an empty environment.
type notifier struct {
	log hclog.Logger
	on  bool // NOTIFY_SOCKET is set
	// conn is connected to NOTIFY_SOCKET at start, while the process may
	// still reach it: once the supervisor drops to its account it may not
	// be allowed to search the socket's directory or write the socket.
	conn *net.UnixConn
	// watchdog is WATCHDOG_USEC when the service manager watches this
	// process (WATCHDOG_PID unset or ours), else 0.
	watchdog time.Duration

	mu         sync.Mutex // serialises messages, guards lastStatus
	lastStatus string
	// mainPID: READY=1 names this process the main one (MAINPID=): it took
	// over from an old gatehouse in an upgrade. Set before watch runs.
	mainPID bool
	// quiet: this process handed over to a new one, which speaks for the
	// service now.
	quiet atomic.Bool
}

// newNotifier reads NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID; the
// watchdog variables are unset.
func newNotifier(log hclog.Logger) *notifier {
	n := &notifier{log: log, on: os.Getenv("NOTIFY_SOCKET") != ""}
	if n.on {
		addr := os.Getenv("NOTIFY_SOCKET")
		if strings.HasPrefix(addr, "@") {
			addr = "\x00" + addr[1:] // abstract namespace
		}
		c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
		if err != nil {
			log.Warn("connecting to the service manager's notify socket", "error", err)
		}
		n.conn = c
	}
	iv, err := daemon.SdWatchdogEnabled(true)
	if err != nil {
		log.Warn("ignoring the service manager's watchdog settings", "error", err)
	}
	if n.on {
		n.watchdog = iv
	}
	return n
}

// send sends one notification of newline-separated assignments.
func (n *notifier) send(state string) {
	if !n.on {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.sendLocked(state)
}

func (n *notifier) sendLocked(state string) {
	if n.conn == nil || n.quiet.Load() {
		return
	}
	if _, err := n.conn.Write([]byte(state)); err != nil {
		n.log.Warn("notifying the service manager", "error", err)
	}
}

// status sends STATUS= when it differs from the last one sent.
func (n *notifier) status(s string) {
	if !n.on {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if s == n.lastStatus {
		return
	}
	n.lastStatus = s
	n.sendLocked("STATUS=" + s)
}

// ready sends READY=1 with a status line.
func (n *notifier) ready(s string) {
	if !n.on {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.lastStatus = s
	main := ""
	if n.mainPID {
		main = "MAINPID=" + strconv.Itoa(os.Getpid()) + "\n"
	}
	n.sendLocked(main + daemon.SdNotifyReady + "\nSTATUS=" + s)
}

// reloading sends RELOADING=1 with the monotonic timestamp Type=notify-reload
// needs.
func (n *notifier) reloading(s string) {
	if !n.on {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.lastStatus = s
	n.sendLocked(daemon.SdNotifyReloading + "\n" + daemon.SdNotifyMonotonicUsec() + "STATUS=" + s)
}

// stopping sends STOPPING=1.
func (n *notifier) stopping(s string) {
	if !n.on {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.lastStatus = s
	n.sendLocked(daemon.SdNotifyStopping + "\nSTATUS=" + s)
}

// watch runs until done is closed: it sends READY=1 once sup is ready, pings
// the watchdog at half its interval while the dispatcher answers a Snapshot
// within that half (a stuck loop stops the pings, and the service manager
// restarts gatehouse), and refreshes STATUS=.
func (n *notifier) watch(done <-chan struct{}, sup supervised, started *atomic.Bool) {
	if !n.on {
		return
	}
	var ping <-chan time.Time
	half := n.watchdog / 2
	if half > 0 {
		t := time.NewTicker(half)
		defer t.Stop()
		ping = t.C
		n.log.Debug("watchdog enabled", "interval", n.watchdog)
	}
	st := time.NewTicker(statusInterval)
	defer st.Stop()
	ready := sup.Ready()
	for {
		select {
		case <-done:
			return
		case <-ready:
			ready = nil
			snap, err := snapshot(sup, 5*time.Second)
			if err != nil {
				n.ready("serving")
			} else {
				n.ready(statusLine(snap))
			}
			started.Store(true)
		case <-ping:
			if _, err := snapshot(sup, half); err != nil {
				n.log.Warn("dispatcher did not answer within half the watchdog interval; withholding the watchdog ping", "interval", n.watchdog, "error", err)
				continue
			}
			n.send(daemon.SdNotifyWatchdog)
		case <-st.C:
			if !started.Load() {
				continue
			}
			if snap, err := snapshot(sup, 5*time.Second); err == nil && !snap.Stopping {
				n.status(statusLine(snap))
			}
		}
	}
}

// supervised is what the notifier needs of a *supervisor.Supervisor (a fake
// in tests).
type supervised interface {
	Ready() <-chan struct{}
	Snapshot(context.Context) (view.Snapshot, error)
}

func snapshot(sup supervised, limit time.Duration) (view.Snapshot, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	return sup.Snapshot(ctx)
}

// statusLine is the STATUS= text: "serving on 127.0.0.1:8080, 4 workers, 12
// connections (3 at workers)".
func statusLine(s view.Snapshot) string {
	addrs := make([]string, len(s.Listeners))
	for i, a := range s.Listeners {
		addrs[i] = a.String()
	}
	ready := 0
	for _, w := range s.Workers {
		if w.State == "ready" {
			ready++
		}
	}
	conns := 0
	for _, n := range s.Conns {
		conns += n
	}
	workers := fmt.Sprintf("%d workers", ready)
	if ready != len(s.Workers) {
		workers = fmt.Sprintf("%d/%d workers ready", ready, len(s.Workers))
	}
	return fmt.Sprintf("serving on %s, %s, %d connections (%d at workers)", strings.Join(addrs, " "), workers, conns, s.AtWorkers)
}

// oneLine makes an error fit a STATUS= line.
func oneLine(s string) string { return strings.ReplaceAll(s, "\n", "; ") }
