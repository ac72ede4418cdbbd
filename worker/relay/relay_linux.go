package relay

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// spliceMax is the most one splice moves into the pipe: its default size.
const spliceMax = 64 << 10

// splice relays src to dst through a pipe with splice(2), so the bytes never
// enter user space: no buffer per direction, one pipe (two descriptors,
// CLOEXEC) instead. It returns errNoSplice, before moving a byte, when the
// kernel refuses the pair, or a side is not a socket of its own (a TLS
// connection's bytes are not the plaintext).
func (s *relayState) splice(dst, src Conn) (int64, error) {
	srcS, ok := src.(socketSide)
	if !ok {
		return 0, errNoSplice
	}
	dstS, ok := dst.(socketSide)
	if !ok {
		return 0, errNoSplice
	}
	srcRC, err := srcS.SyscallConn()
	if err != nil {
		return 0, errNoSplice
	}
	dstRC, err := dstS.SyscallConn()
	if err != nil {
		return 0, errNoSplice
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return 0, errNoSplice
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	const flags = unix.SPLICE_F_MOVE | unix.SPLICE_F_NONBLOCK
	var total int64
	for {
		src.SetReadDeadline(s.deadline())
		var n int64
		var serr error
		err := srcRC.Read(func(fd uintptr) bool {
			n, serr = unix.Splice(int(fd), nil, p[1], nil, spliceMax, flags)
			return !errors.Is(serr, unix.EAGAIN) && !errors.Is(serr, unix.EINTR)
		})
		switch {
		case err != nil && s.waitAgain(err):
			continue
		case err != nil:
			return total, err
		case total == 0 && (errors.Is(serr, unix.EINVAL) || errors.Is(serr, unix.ENOSYS)):
			return 0, errNoSplice
		case serr != nil:
			return total, serr
		case n == 0:
			return total, nil // EOF
		}
		s.touch()
		// The pipe was empty, so all n bytes are in it: move them out
		// before reading again.
		for n > 0 {
			dst.SetWriteDeadline(time.Now().Add(s.idle))
			var m int64
			err := dstRC.Write(func(fd uintptr) bool {
				m, serr = unix.Splice(p[0], nil, int(fd), nil, int(n), flags)
				return !errors.Is(serr, unix.EAGAIN) && !errors.Is(serr, unix.EINTR)
			})
			if err == nil {
				err = serr
			}
			if err != nil {
				return total, err
			}
			n -= m
			total += m
		}
		s.touch()
	}
}
