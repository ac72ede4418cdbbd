package supervisor

import (
	"fmt"
	"net/netip"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gatehouse-dev/gatehouse/supervisor/limits"
	"github.com/gatehouse-dev/gatehouse/supervisor/spawn"
)

// Why a worker died: the reason label of gatehouse_worker_deaths_total. A
// worker dies only for a real violation by code inside it (docs/DESIGN.md
// §1), so each reason names who ended it.
const (
	// DeathSeccomp: the kernel killed it (SIGSYS) for a system call outside
	// the seccomp allow-list.
	DeathSeccomp = "seccomp"
	// DeathSignal: another signal ended it (an operator's kill, the OOM
	// killer, a crash in the runtime).
	DeathSignal = "signal"
	// DeathExit: it exited without being asked to (a panic, a failed start).
	DeathExit = "exit"
	// DeathProtocol: the supervisor killed it for breaking the IPC protocol.
	DeathProtocol = "protocol"
	// DeathPing: the supervisor killed it for not answering pings.
	DeathPing = "ping"
)

// killedAtShutdown marks a worker the supervisor killed while stopping (the
// grace ran out, or it was still starting): its end is no death.
const killedAtShutdown = "shutdown"

// deathReason classifies a reaped worker. killedFor is the reason the
// supervisor killed it for, or "": it applies only when the process did die
// of the supervisor's SIGKILL, not of something that got there first.
func deathReason(m spawn.Exited, killedFor string) string {
	switch {
	case killedFor != "" && m.Signal == unix.SIGKILL:
		return killedFor
	case m.Signal == unix.SIGSYS:
		return DeathSeccomp
	case m.Signal != 0:
		return DeathSignal
	}
	return DeathExit
}

func signalName(sig syscall.Signal) string {
	if sig == 0 {
		return "none"
	}
	if name := unix.SignalName(sig); name != "" {
		return name
	}
	return sig.String()
}

// lostConn is a client connection a worker held when it went away.
type lostConn struct {
	client   netip.Addr
	trusted  bool
	listener uint64 // the listener's id
}

// maxLoggedConns bounds the connections one death's log line names.
const maxLoggedConns = 32

// connsLost logs the connections a worker held when it went away, by client
// key and listener, and strikes each client key (once per death; trusted
// proxies exempt) in the penalty box, which refuses a key present at too
// many deaths (docs/DESIGN.md §2.10). A worker killed for a protocol
// violation strikes no one: a compromised worker could otherwise have the
// clients it holds refused by breaking the protocol on purpose.
func (d *dispatcher) connsLost(w *workerProc, reason string, held []lostConn, now time.Time) {
	names := make([]string, 0, min(len(held), maxLoggedConns))
	struck := make(map[netip.Addr]bool, len(held))
	for i, h := range held {
		if i < maxLoggedConns {
			names = append(names, d.logClient(h.client)+" on "+d.listenerName(h.listener))
		}
		if w.killedFor == DeathProtocol || h.trusted || struck[h.client] {
			continue
		}
		struck[h.client] = true
		if d.penalties.Strike(h.client, now) {
			d.log.Warn("client refused: it had connections at dying workers too often",
				"client", d.logClient(h.client), "deaths", d.penalties.Threshold(), "within", limits.PenaltyWindow, "refused_for", d.penalties.Duration())
			if d.store != nil {
				d.store.Penalize(h.client, d.penalties.Duration())
			}
		}
	}
	args := []any{"worker", w.slot, "pid", w.pid, "reason", reason, "connections", strings.Join(names, ", ")}
	if len(held) > maxLoggedConns {
		args = append(args, "more", len(held)-maxLoggedConns)
	}
	d.log.Warn("connections closed with their worker", args...)
}

// logClient is a client key for the log: whole, or masked to /24 (IPv4) or
// /48 (IPv6) when log.log_client_addresses is false.
func (d *dispatcher) logClient(key netip.Addr) string {
	if d.cfg.Log.ClientAddresses {
		return key.String()
	}
	bits := 48
	if key.Is4() {
		bits = 24
	}
	p, _ := key.Prefix(bits)
	return p.String()
}

// listenerName names the listener with id, or gives the id when a reload
// closed it.
func (d *dispatcher) listenerName(id uint64) string {
	for _, l := range d.listeners {
		if l.id == id {
			return l.name
		}
	}
	return fmt.Sprintf("listener %d", id)
}
