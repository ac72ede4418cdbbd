package admin

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// listenUnix creates a listening Unix stream socket at path whose file has
// mode 0600 from its creation: bind runs under umask 0177 (and on Linux the
// socket itself is 0600 before bind), so no chmod by path follows, which a
// symlink swapped in by whoever can write the directory would redirect.
// listen comes last, so a connect before it is refused. The umask is the
// process's for the instant of bind; files created meanwhile by other
// goroutines get no more than 0600.
func listenUnix(path string) (*net.UnixListener, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()                  // net.FileListener keeps a dup
	unix.Fchmod(fd, adminSocketMode) // best effort: not every system honours it on a socket
	old := unix.Umask(0o777 &^ adminSocketMode)
	err = unix.Bind(fd, &unix.SockaddrUnix{Name: path})
	unix.Umask(old)
	if err != nil {
		return nil, os.NewSyscallError("bind", err)
	}
	if err := unix.Listen(fd, adminMaxConns); err != nil {
		os.Remove(path)
		return nil, os.NewSyscallError("listen", err)
	}
	l, err := net.FileListener(f)
	if err != nil {
		os.Remove(path)
		return nil, err
	}
	return l.(*net.UnixListener), nil
}

// errAdminInUse is returned for an admin socket another process answers on.
var errAdminInUse = errors.New("another process is serving on it")

// removeStaleSocket removes a socket file left at path by a process that is
// gone: only a socket, and only one that refuses connections.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%s exists and is not a socket", path)
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return errAdminInUse
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("probing the existing socket: %w", err)
	}
	return os.Remove(path)
}

// Dup returns a duplicate of the listening socket (close-on-exec), for a
// new supervisor. Not File: its descriptor's Fd would make the socket,
// whose flags the duplicate shares, blocking, and Close would then wait
// for an Accept that nothing wakes.
func (a *Server) Dup() (int, error) {
	rc, err := a.ln.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd, derr := -1, error(nil)
	if err := rc.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return -1, err
	}
	return fd, derr
}

// Detach stops accepting and leaves the socket file in place at Close: a
// new supervisor serves it now. Connections accepted already are served
// on.
func (a *Server) Detach() {
	a.mu.Lock()
	a.detached = true
	a.mu.Unlock()
	a.ln.Close()
}
