package sockets

import "golang.org/x/sys/unix"

// CloseOnExecInherited marks every descriptor above stderr close-on-exec, so
// that nothing gatehouse inherited from its parent (a shell's pipe, a stray
// socket) reaches a worker: exec keeps any descriptor without the flag, and
// a worker must hold fds 0–3 and what it is handed, nothing else.
func CloseOnExecInherited() error {
	return unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
}
