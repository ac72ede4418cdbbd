//go:build !linux

package launcher

import "syscall"

// Supported is false: without a parent-death signal and /proc/self/fd the
// launcher is not started, and an upgrade runs as the supervisor's account.
const Supported = false

func procAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
