package sys

import (
	"bytes"
	"os"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// AllThreadsPrctl calls prctl on every OS thread of the process. It fails
// with ENOTSUP when the binary uses cgo.
func AllThreadsPrctl(option, arg2, arg3, arg4, arg5 uintptr) error {
	_, _, e := syscall.AllThreadsSyscall6(unix.SYS_PRCTL, option, arg2, arg3, arg4, arg5, 0)
	if e != 0 {
		return os.NewSyscallError("prctl", e)
	}
	return nil
}

// Prctl calls prctl on the current thread and returns its result.
func Prctl(option, arg2, arg3, arg4, arg5 uintptr) (int, error) {
	r, _, e := unix.Syscall6(unix.SYS_PRCTL, option, arg2, arg3, arg4, arg5, 0)
	if e != 0 {
		return 0, os.NewSyscallError("prctl", e)
	}
	return int(r), nil
}

// SeccompMode returns the current thread's seccomp mode (PR_GET_SECCOMP):
// 0 none, 1 strict, 2 filter.
func SeccompMode() (int, error) { return Prctl(unix.PR_GET_SECCOMP, 0, 0, 0, 0) }

// Securebits (linux/securebits.h), not exported by x/sys/unix.
const (
	secbitNoroot              = 1 << 0
	secbitNorootLocked        = 1 << 1
	secbitNoSetuidFixup       = 1 << 2
	secbitNoSetuidFixupLocked = 1 << 3
	secbitKeepCapsLocked      = 1 << 5
)

func hasPermitted(c int) (bool, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var d [2]unix.CapUserData
	if err := unix.Capget(&hdr, &d[0]); err != nil {
		return false, os.NewSyscallError("capget", err)
	}
	return d[c/32].Permitted&(1<<(c%32)) != 0, nil
}

// AllThreadsDropBoundingSet empties the capability bounding set of every
// thread. It needs CAP_SETPCAP and does nothing without it.
func AllThreadsDropBoundingSet() error {
	if ok, err := hasPermitted(unix.CAP_SETPCAP); err != nil || !ok {
		return err
	}
	for c := 0; ; c++ {
		err := AllThreadsPrctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
		if err != nil && c > unix.CAP_LAST_CAP {
			return nil // past the running kernel's last capability: EINVAL
		}
		if err != nil {
			return err
		}
	}
}

// AllThreadsClearCaps drops every capability of every thread: when
// CAP_SETPCAP is held it first locks the securebits so that uid 0 never
// regains capabilities; then it clears the ambient set and sets the
// effective, permitted and inheritable sets to zero.
func AllThreadsClearCaps() error {
	ok, err := hasPermitted(unix.CAP_SETPCAP)
	if err != nil {
		return err
	}
	if ok {
		const bits = secbitNoroot | secbitNorootLocked | secbitNoSetuidFixup |
			secbitNoSetuidFixupLocked | secbitKeepCapsLocked
		if err := AllThreadsPrctl(unix.PR_SET_SECUREBITS, bits, 0, 0, 0); err != nil {
			return err
		}
	}
	if err := AllThreadsPrctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return err
	}
	var zero [2]unix.CapUserData
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	_, _, e := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&zero[0])), 0)
	if e != 0 {
		return os.NewSyscallError("capset", e)
	}
	return nil
}

// CapsEmpty reports whether the current thread holds no effective, permitted
// or inheritable capability.
func CapsEmpty() (bool, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var d [2]unix.CapUserData
	if err := unix.Capget(&hdr, &d[0]); err != nil {
		return false, os.NewSyscallError("capget", err)
	}
	for _, x := range d {
		if x.Effective|x.Permitted|x.Inheritable != 0 {
			return false, nil
		}
	}
	return true, nil
}

// InInitialUserNS reports whether the process is in the initial user
// namespace (its uid_map is the identity over the whole range).
func InInitialUserNS() (bool, error) {
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return false, err
	}
	return strings.Join(strings.Fields(string(bytes.TrimSpace(b))), " ") == "0 0 4294967295", nil
}
