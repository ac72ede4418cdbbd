package sysio

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Read is read(2) on a non-blocking descriptor: a worker's client socket,
// whose O_NONBLOCK the supervisor set when it accepted it.
func Read(fd int, p []byte) (int, error) {
	n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// Write is write(2) on a non-blocking descriptor, as Read.
func Write(fd int, p []byte) (int, error) {
	n, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// SendParts sends a then b in one sendmsg(2) on a non-blocking socket,
// with MSG_NOSIGNAL, and MSG_MORE when more: the kernel then holds a
// segment that is not full for what the next send adds. a is not empty;
// b may be.
func SendParts(fd int, a, b []byte, more bool) (int, error) {
	var iov [2]unix.Iovec
	iov[0].Base = &a[0]
	iov[0].SetLen(len(a))
	n := 1
	if len(b) > 0 {
		iov[1].Base = &b[0]
		iov[1].SetLen(len(b))
		n = 2
	}
	var msg unix.Msghdr
	msg.Iov = &iov[0]
	msg.SetIovlen(n)
	flags := unix.MSG_NOSIGNAL
	if more {
		flags |= unix.MSG_MORE
	}
	m, _, e := unix.RawSyscall(unix.SYS_SENDMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), uintptr(flags))
	if e != 0 {
		return 0, e
	}
	return int(m), nil
}

// Peek is recv(2) with MSG_PEEK, made as recvmsg(2) (Recvmsg): a worker's
// system-call filter allows recvmsg and not recvfrom, which Recv makes.
func Peek(fd int, p []byte) (int, error) {
	n, _, _, err := Recvmsg(fd, p, nil, unix.MSG_PEEK)
	return n, err
}

// Close is close(2) on a socket without SO_LINGER, which never blocks. The
// last close of a TCP connection sends its FIN, and over loopback runs the
// peer's TCP input in the closer's call, which can outlast the runtime's
// 20 µs tick: the worker's last copy of a closing connection (the
// supervisor gave its own up at dispatch) closes here.
func Close(fd int) error {
	if _, _, e := unix.RawSyscall(unix.SYS_CLOSE, uintptr(fd), 0, 0); e != 0 {
		return e
	}
	return nil
}
