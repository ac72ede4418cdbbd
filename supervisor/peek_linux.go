package supervisor

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// peekInput is recv(MSG_PEEK|MSG_DONTWAIT) into buf without the sender's address:
// unix.Recvfrom decodes a TCP peer's into a Sockaddr, a heap allocation per
// peek, and the dispatcher knows its peers already.
func peekInput(fd int, buf []byte) (int, error) {
	var p unsafe.Pointer
	if len(buf) > 0 {
		p = unsafe.Pointer(&buf[0])
	}
	n, _, e := unix.Syscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(p), uintptr(len(buf)), unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
