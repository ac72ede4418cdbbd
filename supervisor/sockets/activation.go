package sockets

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// Socket activation (sd_listen_fds(3)): the init system binds the listening
// sockets and passes them from descriptor 3 on, with LISTEN_PID naming the
// process they are for, LISTEN_FDS their count and LISTEN_FDNAMES their
// colon-separated names (FileDescriptorName= in the .socket unit).

// listenFDsStart is SD_LISTEN_FDS_START, the first passed descriptor.
const listenFDsStart = 3

// maxListenFDs bounds LISTEN_FDS; gatehouse has a handful of listeners.
const maxListenFDs = 1024

// ErrActivation marks malformed socket-activation variables or a passed
// socket no listener matches.
var ErrActivation = errors.New("supervisor: socket activation")

// ActivatedSocket is one descriptor passed by the init system.
type ActivatedSocket struct {
	FD   int
	Name string // from LISTEN_FDNAMES; "" when it is absent
}

// ListenFDs returns the sockets passed to this process by socket activation,
// or nil when there are none (LISTEN_PID unset, or naming another process).
// It unsets LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES in every case, so that
// no child inherits them, and marks each passed descriptor close-on-exec. The
// caller owns the descriptors.
//
// Unlike go-systemd's activation.Files, which returns nil for malformed
// variables and wraps each descriptor in an *os.File whose finalizer may close
// it, ListenFDs returns an error (ErrActivation) and raw descriptors.
func ListenFDs() ([]ActivatedSocket, error) {
	pid, fds, names := os.Getenv("LISTEN_PID"), os.Getenv("LISTEN_FDS"), os.Getenv("LISTEN_FDNAMES")
	for _, k := range []string{"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"} {
		os.Unsetenv(k)
	}
	socks, err := parseListenFDs(os.Getpid(), pid, fds, names)
	if err != nil {
		return nil, err
	}
	for _, s := range socks {
		if _, err := unix.FcntlInt(uintptr(s.FD), unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
			return nil, fmt.Errorf("%w: LISTEN_FDS=%s: descriptor %d: %w", ErrActivation, fds, s.FD, os.NewSyscallError("fcntl", err))
		}
	}
	return socks, nil
}

// parseListenFDs interprets the three variables for the process pid.
func parseListenFDs(pid int, listenPID, listenFDs, listenFDNames string) ([]ActivatedSocket, error) {
	if listenPID == "" {
		return nil, nil // as sd_listen_fds: nothing is passed without LISTEN_PID
	}
	p, err := strconv.Atoi(listenPID)
	if err != nil || p <= 0 {
		return nil, fmt.Errorf("%w: LISTEN_PID=%q is not a process id", ErrActivation, listenPID)
	}
	if p != pid {
		return nil, nil // meant for another process (a parent that exec'd us without passing them on)
	}
	n, err := strconv.Atoi(listenFDs)
	if err != nil || n < 0 || n > maxListenFDs {
		return nil, fmt.Errorf("%w: LISTEN_FDS=%q is not a count of descriptors (0..%d)", ErrActivation, listenFDs, maxListenFDs)
	}
	var names []string
	if listenFDNames != "" {
		names = strings.Split(listenFDNames, ":")
		if len(names) != n {
			return nil, fmt.Errorf("%w: LISTEN_FDNAMES=%q names %d descriptors, LISTEN_FDS=%d", ErrActivation, listenFDNames, len(names), n)
		}
	}
	socks := make([]ActivatedSocket, n)
	for i := range socks {
		socks[i].FD = listenFDsStart + i
		if names != nil {
			socks[i].Name = names[i]
		}
	}
	return socks, nil
}

// MatchInherited assigns each passed socket to a listener of cfg: to the
// listener of its name (LISTEN_FDNAMES), else to the listener whose
// configured address is the socket's bound address. The result is
// Options.Inherited. A socket that matches no listener, or a listener matched
// twice, is an error (ErrActivation); on error every descriptor in socks is
// closed, otherwise the caller (then New) owns them. A socket matched by name
// whose bound address differs from its listener's configured one is served,
// as systemd bound it, with a warning on log: the operator's two files
// disagree.
func MatchInherited(cfg *config.Config, socks []ActivatedSocket, log hclog.Logger) (map[string]int, error) {
	out := make(map[string]int, len(socks))
	for _, s := range socks {
		name, err := matchSocket(cfg, s, log)
		if err == nil {
			if _, dup := out[name]; dup {
				err = fmt.Errorf("%w: descriptor %d is a second socket for listener %q", ErrActivation, s.FD, name)
			}
		}
		if err != nil {
			for _, s := range socks {
				unix.Close(s.FD)
			}
			return nil, err
		}
		out[name] = s.FD
	}
	return out, nil
}

func matchSocket(cfg *config.Config, s ActivatedSocket, log hclog.Logger) (string, error) {
	sa, err := unix.Getsockname(s.FD)
	if err != nil {
		return "", fmt.Errorf("%w: descriptor %d (name %q): %w", ErrActivation, s.FD, s.Name, os.NewSyscallError("getsockname", err))
	}
	bound := AddrPort(sa)
	for _, l := range cfg.Listeners {
		if s.Name != "" && l.Name == s.Name {
			if !sameAddrPort(l.Address, bound) {
				log.Warn("socket activation: the passed socket is bound elsewhere than its listener's configured address; serving on the passed socket",
					"listener", l.Name, "bound", bound.String(), "configured", l.Address.String())
			}
			return l.Name, nil
		}
	}
	if bound.IsValid() {
		for _, l := range cfg.Listeners {
			if sameAddrPort(l.Address, bound) {
				return l.Name, nil
			}
		}
	}
	return "", fmt.Errorf("%w: descriptor %d (name %q, address %v) matches no listener block by name or address; "+
		"set FileDescriptorName= in the socket unit to a listener's name", ErrActivation, s.FD, s.Name, bound)
}

func sameAddrPort(a, b netip.AddrPort) bool {
	return a.Port() == b.Port() && a.Addr().Unmap() == b.Addr().Unmap()
}
