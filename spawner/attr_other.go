//go:build !linux

package spawner

import "syscall"

// procAttr runs the spawner as opts.Credential in a session of its own;
// this system has no ambient capabilities or parent-death signal (the
// spawner exits when its socket closes).
func procAttr(opts Options) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: opts.Credential, Setsid: true}
}

// cloneflags is 0: this system has no namespaces.
func cloneflags(*syscall.SysProcAttr) uint64 { return 0 }
