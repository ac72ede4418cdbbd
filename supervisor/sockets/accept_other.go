//go:build !linux

package sockets

import (
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// Accept takes one connection and makes it non-blocking, close-on-exec and
// TCP_NODELAY (set here, not trusted to be inherited from the listener).
// x/sys offers no accept4 here, so the two steps run under ForkLock, as the
// standard library does, so that no fork in between inherits the descriptor.
func Accept(lfd int) (int, netip.AddrPort, error) {
	syscall.ForkLock.RLock()
	fd, sa, err := unix.Accept(lfd)
	if err == nil {
		unix.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return -1, netip.AddrPort{}, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return -1, netip.AddrPort{}, err
	}
	if err := SetNoDelay(fd); err != nil {
		unix.Close(fd)
		return -1, netip.AddrPort{}, err
	}
	return fd, AddrPort(sa), nil
}

// SetDeferAccept reports false: only Linux's TCP_DEFER_ACCEPT is used; here
// every accepted connection waits for its first bytes under the poller.
func SetDeferAccept(fd int) bool { return false }
