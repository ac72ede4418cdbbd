//go:build linux && !(386 || arm)

package sys

import "golang.org/x/sys/unix"

const (
	sysSetresuid = unix.SYS_SETRESUID
	sysSetresgid = unix.SYS_SETRESGID
)
