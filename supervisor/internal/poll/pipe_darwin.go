package poll

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// newWakePipe returns a non-blocking, close-on-exec pipe (read end, write
// end). Darwin has no pipe2, so the flags are set afterwards under
// syscall.ForkLock, as the os package does for its pipes on Darwin.
func newWakePipe() (r, w int, err error) {
	var p [2]int
	syscall.ForkLock.RLock()
	err = unix.Pipe(p[:])
	if err == nil {
		unix.CloseOnExec(p[0])
		unix.CloseOnExec(p[1])
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return -1, -1, os.NewSyscallError("pipe", err)
	}
	for _, fd := range p {
		if err := unix.SetNonblock(fd, true); err != nil {
			unix.Close(p[0])
			unix.Close(p[1])
			return -1, -1, os.NewSyscallError("fcntl", err)
		}
	}
	return p[0], p[1], nil
}
