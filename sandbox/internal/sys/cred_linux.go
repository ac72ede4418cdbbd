package sys

import (
	"os"

	"golang.org/x/sys/unix"
)

// ThreadCredentials makes the calling thread, alone, run as uid and gid
// with no supplementary groups: the raw system calls, which Linux applies
// to one thread, where syscall.Setresuid and the like apply to every
// thread of the process. The thread keeps no capability once it leaves uid
// 0. The caller locks its goroutine to the thread and never unlocks it, so
// that the runtime ends the thread with the goroutine.
func ThreadCredentials(uid, gid int) error {
	if err := unix.Setgroups(nil); err != nil { // raw: this thread only
		return os.NewSyscallError("setgroups", err)
	}
	if _, _, e := unix.RawSyscall(sysSetresgid, uintptr(gid), uintptr(gid), uintptr(gid)); e != 0 {
		return os.NewSyscallError("setresgid", e)
	}
	if _, _, e := unix.RawSyscall(sysSetresuid, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
		return os.NewSyscallError("setresuid", e)
	}
	return nil
}
