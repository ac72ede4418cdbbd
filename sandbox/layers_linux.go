package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gatehouse-dev/gatehouse/sandbox/internal/sys"
)

// Resource limits set by Apply.
const (
	// nofileMax leaves room for Concurrency connections plus fds in flight
	// (SCM_RIGHTS delivery stops silently at the limit, with MSG_CTRUNC).
	nofileMax = 4096
)

// chrootDirPrefix names the private directory Apply creates when
// Policy.Chroot is empty.
const chrootDirPrefix = "gatehouse-empty-"

func inInitialUserNS() (bool, error) { return sys.InInitialUserNS() }

// applyChroot makes an empty directory the process root. With dir == "" it
// creates a private directory under the temporary directory, enters it and
// removes it again: the root is then an unlinked directory in which nothing
// can ever be created, and no state is left behind.
func applyChroot(dir string) Layer {
	l := Layer{Name: "chroot"}
	if dir != "" {
		if err := chroot(dir); err != nil {
			l.Detail = err.Error()
			return l
		}
		l.Applied, l.Detail = true, dir
		return l
	}
	tmp, err := os.MkdirTemp("", chrootDirPrefix)
	if err != nil {
		l.Detail = fmt.Sprintf("creating empty directory: %v", err)
		return l
	}
	parent, err := unix.Open(filepath.Dir(tmp), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		os.Remove(tmp)
		l.Detail = fmt.Sprintf("opening %s: %v", filepath.Dir(tmp), err)
		return l
	}
	defer unix.Close(parent)
	if err := chroot(tmp); err != nil {
		os.Remove(tmp)
		l.Detail = err.Error()
		return l
	}
	// tmp is now unreachable by path; remove it through its parent.
	if err := unix.Unlinkat(parent, filepath.Base(tmp), unix.AT_REMOVEDIR); err != nil {
		l.Detail = fmt.Sprintf("removing %s after chroot: %v", tmp, os.NewSyscallError("unlinkat", err))
		return l
	}
	l.Applied, l.Detail = true, tmp+" (deleted)"
	return l
}

func chroot(dir string) error {
	if err := unix.Chroot(dir); err != nil {
		return os.NewSyscallError("chroot", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return os.NewSyscallError("chdir", err)
	}
	return nil
}

// applyIdentity leaves the process without privilege. In a user namespace
// (SpawnAttr maps namespace uid 0 to the unprivileged host account) the host
// identity is already unprivileged, so it clears every capability the
// process holds in its namespace. Started as host root without a user
// namespace, it switches to uid/gid (all threads: syscall.Setres[ug]id).
func applyIdentity(inInitNS bool, uidMap string, uid, gid int) Layer {
	l := Layer{Name: "identity"}
	if err := sys.AllThreadsDropBoundingSet(); err != nil {
		l.Detail = capsError(err)
		return l
	}
	switched := false
	switch {
	case !inInitNS:
		l.Detail = fmt.Sprintf("user namespace (uid map %q), all capabilities cleared", uidMap)
	case os.Geteuid() == 0:
		if err := syscall.Setgroups([]int{}); err != nil {
			l.Detail = os.NewSyscallError("setgroups", err).Error()
			return l
		}
		if err := syscall.Setresgid(gid, gid, gid); err != nil {
			l.Detail = os.NewSyscallError("setresgid", err).Error()
			return l
		}
		if err := syscall.Setresuid(uid, uid, uid); err != nil {
			l.Detail = os.NewSyscallError("setresuid", err).Error()
			return l
		}
		switched = true
		l.Detail = fmt.Sprintf("uid %d gid %d, no supplementary groups", uid, gid)
	default:
		l.Detail = fmt.Sprintf("already unprivileged (uid %d)", os.Geteuid())
	}
	if err := sys.AllThreadsClearCaps(); err != nil {
		l.Detail = capsError(err)
		return l
	}
	if empty, err := sys.CapsEmpty(); err != nil || !empty {
		l.Detail = fmt.Sprintf("capabilities remain after dropping them (%v)", err)
		return l
	}
	if switched {
		if r, e, s := unix.Getresuid(); r != uid || e != uid || s != uid {
			l.Detail = fmt.Sprintf("uids %d/%d/%d after setresuid(%d)", r, e, s, uid)
			return l
		}
	}
	l.Applied = true
	return l
}

func capsError(err error) string {
	if errors.Is(err, unix.ENOTSUP) {
		return fmt.Sprintf("%v (binary uses cgo: build the worker with CGO_ENABLED=0)", err)
	}
	return err.Error()
}

// applyNoNewPrivs sets no_new_privs on every thread (Landlock needs it on
// each; seccomp's TSYNC would also propagate it).
func applyNoNewPrivs() Layer {
	l := Layer{Name: "no_new_privs"}
	if err := sys.AllThreadsPrctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		l.Detail = capsError(err)
		return l
	}
	l.Applied, l.Detail = true, "all threads"
	return l
}

// applyNotDumpable clears the dumpable flag: no core dump, /proc/PID files
// owned by root, no ptrace attach by the same uid.
func applyNotDumpable() Layer {
	l := Layer{Name: "dumpable"}
	if _, err := sys.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		l.Detail = err.Error()
		return l
	}
	l.Applied, l.Detail = true, "0"
	return l
}

// applyRlimits sets soft and hard limits (lowering a hard limit is
// irreversible). Go raised the soft RLIMIT_NOFILE at start-up, so it must be
// set here, inside the worker. RLIMIT_FSIZE 0: a worker writes no file (its
// access lines go to a pipe).
func applyRlimits() Layer {
	l := Layer{Name: "rlimits"}
	nofile := uint64(nofileMax)
	var cur unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &cur); err == nil && cur.Max < nofile {
		nofile = cur.Max
	}
	for _, r := range []struct {
		res int
		max uint64
	}{{unix.RLIMIT_CORE, 0}, {unix.RLIMIT_FSIZE, 0}, {unix.RLIMIT_NOFILE, nofile}} {
		lim := unix.Rlimit{Cur: r.max, Max: r.max}
		if err := unix.Prlimit(0, r.res, &lim, nil); err != nil {
			l.Detail = os.NewSyscallError("prlimit64", err).Error()
			return l
		}
	}
	l.Applied, l.Detail = true, fmt.Sprintf("core 0, fsize 0, nofile %d", nofile)
	return l
}
