package launcher

import "syscall"

// Supported: the launcher relies on Linux's parent-death signal and on
// executing a checked descriptor through /proc/self/fd.
const Supported = true

// procAttr kills the launcher when the thread that started it exits.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
