package supervisor

import (
	"syscall"

	"golang.org/x/sys/unix"
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

// deathCause is one series of gatehouse_worker_deaths_total.
type deathCause struct {
	reason string
	signal syscall.Signal // 0 when it exited
}

// deathReason classifies a reaped worker. killedFor is the reason the
// supervisor killed it for, or "": it applies only when the process did die
// of the supervisor's SIGKILL, not of something that got there first.
func deathReason(m exitResult, killedFor string) string {
	switch {
	case killedFor != "" && m.signal == unix.SIGKILL:
		return killedFor
	case m.signal == unix.SIGSYS:
		return DeathSeccomp
	case m.signal != 0:
		return DeathSignal
	}
	return DeathExit
}

// DeathCount is the number of worker deaths of one reason and signal.
type DeathCount struct {
	Reason string
	// Signal is the signal's name ("SIGSYS"), or "none" for an exit.
	Signal string
	N      uint64
}

// DeathsByReason sums s.Deaths by reason.
func (s Snapshot) DeathsByReason() map[string]uint64 {
	m := map[string]uint64{}
	for _, d := range s.Deaths {
		m[d.Reason] += d.N
	}
	return m
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
