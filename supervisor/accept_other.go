//go:build !linux

package supervisor

import (
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// accept takes one connection and makes it non-blocking, close-on-exec and
// TCP_NODELAY (set here, not trusted to be inherited from the listener).
// x/sys offers no accept4 here, so the two steps run under ForkLock, as the
// standard library does, so that no fork in between inherits the descriptor.
func accept(lfd int) (int, netip.AddrPort, error) {
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
	if err := setNoDelay(fd); err != nil {
		unix.Close(fd)
		return -1, netip.AddrPort{}, err
	}
	return fd, sockaddrAddrPort(sa), nil
}
