package admin

import (
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// peerUID is the effective uid of the process that connected c, as the
// kernel recorded it at connect (SO_PEERCRED): the peer cannot forge it.
func peerUID(c *net.UnixConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	var cred *unix.Ucred
	var serr error
	if err := rc.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return -1, err
	}
	if serr != nil {
		return -1, os.NewSyscallError("getsockopt SO_PEERCRED", serr)
	}
	return int(cred.Uid), nil
}
