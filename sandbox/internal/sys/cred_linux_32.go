//go:build linux && (386 || arm)

package sys

import "golang.org/x/sys/unix"

// The 32-bit ids' calls: SYS_SETRESUID takes 16-bit ids here.
const (
	sysSetresuid = unix.SYS_SETRESUID32
	sysSetresgid = unix.SYS_SETRESGID32
)
