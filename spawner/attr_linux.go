package spawner

import "syscall"

// procAttr runs the spawner as opts.Credential with opts.AmbientCaps, killed
// when the thread that started it exits, in a session of its own.
func procAttr(opts Options) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Credential:  opts.Credential,
		AmbientCaps: opts.AmbientCaps,
		Pdeathsig:   syscall.SIGKILL,
		Setsid:      true,
	}
}

// cloneflags are the namespaces attr creates.
func cloneflags(attr *syscall.SysProcAttr) uint64 { return uint64(attr.Cloneflags) }
