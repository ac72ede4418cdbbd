package sys

import (
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Landlock is implemented here rather than with go-landlock because
// go-landlock's syscall package imports libcap/psx, which gatehouse's go.mod
// does not carry, and its psx-free build (tag landlocktsync) needs ABI 8.
// Without cgo, psx is syscall.AllThreadsSyscall anyway, which is what we use.

// rulesetAttr is struct landlock_ruleset_attr up to ABI 7 (handled_access_fs,
// handled_access_net, scoped). The kernel accepts a shorter struct.
type rulesetAttr struct {
	handledAccessFS  uint64
	handledAccessNet uint64
	scoped           uint64
}

// pathBeneathAttr is struct landlock_path_beneath_attr. The kernel's
// struct is packed (12 bytes); it reads only those, so Go's padding is harmless.
type pathBeneathAttr struct {
	allowedAccess uint64
	parentFD      int32
}

// LandlockABI returns the kernel's Landlock ABI version, or an error
// (EOPNOTSUPP when Landlock is disabled, ENOSYS when absent).
func LandlockABI() (int, error) {
	v, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if e != 0 {
		return 0, os.NewSyscallError("landlock_create_ruleset", e)
	}
	return int(v), nil
}

// LandlockErrata returns the bitmask of Landlock errata fixed in this kernel.
func LandlockErrata() (uint64, error) {
	v, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_ERRATA)
	if e != 0 {
		return 0, os.NewSyscallError("landlock_create_ruleset", e)
	}
	return uint64(v), nil
}

// LandlockCreateRuleset creates a ruleset and returns its fd (close-on-exec).
// Fields the kernel's ABI does not know must be zero.
func LandlockCreateRuleset(handledFS, handledNet, scoped uint64) (int, error) {
	attr := rulesetAttr{handledAccessFS: handledFS, handledAccessNet: handledNet, scoped: scoped}
	size := unsafe.Sizeof(attr)
	switch {
	case scoped == 0 && handledNet == 0:
		size = 8
	case scoped == 0:
		size = 16
	}
	fd, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if e != 0 {
		return -1, os.NewSyscallError("landlock_create_ruleset", e)
	}
	return int(fd), nil
}

// LandlockAddPathBeneath allows access beneath the directory parentFD
// (which may be an O_PATH descriptor).
func LandlockAddPathBeneath(rulesetFD, parentFD int, access uint64) error {
	attr := pathBeneathAttr{allowedAccess: access, parentFD: int32(parentFD)}
	_, _, e := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(rulesetFD), unix.LANDLOCK_RULE_PATH_BENEATH,
		uintptr(unsafe.Pointer(&attr)), 0, 0, 0)
	if e != 0 {
		return os.NewSyscallError("landlock_add_rule", e)
	}
	return nil
}

// AllThreadsLandlockRestrictSelf enforces the ruleset on every OS thread of
// the process. Each thread must have no_new_privs set (or CAP_SYS_ADMIN).
// It fails with ENOTSUP when the binary uses cgo.
func AllThreadsLandlockRestrictSelf(rulesetFD int) error {
	_, _, e := syscall.AllThreadsSyscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(rulesetFD), 0, 0)
	if e != 0 {
		return os.NewSyscallError("landlock_restrict_self", e)
	}
	return nil
}
