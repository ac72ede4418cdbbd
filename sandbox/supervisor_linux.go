package sandbox

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"github.com/gatehouse-dev/gatehouse/sandbox/internal/sys"
	"golang.org/x/sys/unix"
)

// spawnCaps are the capabilities a supervisor keeps after dropping to its
// user: creating the workers' namespaces (CAP_SYS_ADMIN, which kernels that
// restrict unprivileged user namespaces require) and writing their id maps
// (CAP_SETUID, CAP_SETGID). It keeps nothing else: no file, network or
// ptrace privilege, and its bounding set holds only these.
var spawnCaps = []int{unix.CAP_SYS_ADMIN, unix.CAP_SETUID, unix.CAP_SETGID}

// DropSupervisor confines the supervisor after it bound its listeners:
// no_new_privs on every thread and, when running as root with user set, that
// account's uid and gid with only the capabilities needed to spawn sandboxed
// workers (spawnCaps). It returns what it kept, for the log.
func DropSupervisor(user string) (string, error) {
	if cgoBuild {
		return "", ErrCgo
	}
	if user == "" || os.Geteuid() != 0 {
		return "no_new_privs", sys.AllThreadsPrctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
	}
	uid, gid, err := lookupUser(user)
	if err != nil {
		return "", err
	}
	if uid == 0 || gid == 0 {
		return "", fmt.Errorf("sandbox: user %q is privileged (uid %d gid %d)", user, uid, gid)
	}
	keep := uint64(0)
	for _, c := range spawnCaps {
		keep |= 1 << c
	}
	// The bounding set first, while CAP_SETPCAP is still effective.
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if keep&(1<<c) == 0 {
			if err := sys.AllThreadsPrctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
				return "", err
			}
		}
	}
	if err := sys.AllThreadsPrctl(unix.PR_SET_KEEPCAPS, 1, 0, 0, 0); err != nil {
		return "", err
	}
	if err := syscall.Setgroups(nil); err != nil {
		return "", os.NewSyscallError("setgroups", err)
	}
	if err := syscall.Setresgid(gid, gid, gid); err != nil {
		return "", os.NewSyscallError("setresgid", err)
	}
	if err := syscall.Setresuid(uid, uid, uid); err != nil {
		return "", os.NewSyscallError("setresuid", err)
	}
	// Changing uid made the process non-dumpable, which makes its
	// children's /proc files root's: the supervisor could no longer write
	// a new worker's uid_map. Its kept capabilities still stop a process
	// of the same uid from tracing it (ptrace needs a superset of them).
	if err := sys.AllThreadsPrctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0); err != nil {
		return "", err
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := [2]unix.CapUserData{{Effective: uint32(keep), Permitted: uint32(keep)}, {Effective: uint32(keep >> 32), Permitted: uint32(keep >> 32)}}
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return "", os.NewSyscallError("capset", e)
	}
	if err := sys.AllThreadsPrctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return "", err
	}
	return fmt.Sprintf("no_new_privs, uid %d gid %d, capabilities cap_sys_admin,cap_setuid,cap_setgid", uid, gid), nil
}
