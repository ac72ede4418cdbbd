package sandbox

import (
	"fmt"
	"os"
	"runtime"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"golang.org/x/sys/unix"

	"github.com/gatehouse-dev/gatehouse/sandbox/internal/sys"
)

// The allow-list was derived from `strace -f` of a CGO_ENABLED=0 Go 1.26
// program doing what a worker does after the sandbox closes: recvmsg with
// SCM_RIGHTS on a SOCK_SEQPACKET fd 3, net.FileConn on the received TCP
// socket, net/http serving with deadlines, os.Root openat/fstat/getdents64,
// http.ServeContent (lseek + sendfile), logging to stderr, and a goroutine
// that allocated hard (GC, madvise, new threads, SIGURG preemption).
// Conditions are checked on amd64 and arm64 argument layouts (clone's flags
// are argument 0 there; s390x differs and is not supported).

// Group: Go runtime — scheduler, memory, signals, threads, timers.
var runtimeSyscalls = []string{
	"futex", "sched_yield", "nanosleep", // parking and usleep
	"madvise", "munmap", // GC scavenger, stack and heap release
	"rt_sigreturn", "rt_sigprocmask", "rt_sigaction", "sigaltstack", // signal handling, per-thread setup
	"gettid", "getpid", // preemption signals target (getpid, gettid)
	"restart_syscall", // a syscall interrupted by SIGURG
	"exit",            // a thread whose goroutine exits while locked (LockOSThread)
	"exit_group",
	"clock_gettime", "getrandom", // normally vDSO; syscall fallback
	"sched_getaffinity", "pread64", // GOMAXPROCS updater: affinity and the cgroup file opened at startup
}

// Group: netpoller (epoll) and its wake-up eventfd; created lazily.
var netpollSyscalls = []string{"epoll_pwait", "epoll_ctl", "epoll_create1", "eventfd2"}

// Group: I/O on descriptors the worker already holds: the IPC socket (fd 3),
// received connections, stderr.
var ioSyscalls = []string{
	"read", "write", "writev", "close",
	"recvmsg", "recvmmsg", "sendmsg", // ipc frames with SCM_RIGHTS, several received a call
	"getsockopt", "getsockname", "getpeername", // net.FileConn (SO_TYPE), x/sys SendmsgN
	"shutdown", // half-close before handing a connection back
	// An upgraded connection is relayed with splice(2) through a pipe of its
	// own, so its bytes never enter user space (worker/relay_linux.go).
	// pipe2 makes only an anonymous pipe; splice moves bytes between
	// descriptors the worker already holds.
	"pipe2", "splice",
}

// Group: static files below the os.Root descriptors opened before Apply.
// openat itself is allowed read-only below (argument condition).
var fileSyscalls = []string{
	"fstat", "newfstatat", // File.Stat, Root.Stat
	"lseek",      // http.ServeContent sizes the file
	"sendfile",   // large static file bodies (worker/sendfile_linux.go)
	"getdents64", // directory listing; a request for a directory must not kill the worker
	"readlinkat", // os.Root resolves symlinks itself, within the root
}

// oTmpfileOnly is the kernel's __O_TMPFILE bit. unix.O_TMPFILE is
// __O_TMPFILE|O_DIRECTORY, and os.Root opens every intermediate directory
// with O_DIRECTORY, so refusing all of O_TMPFILE's bits killed the worker on
// any request below a subdirectory.
const oTmpfileOnly = unix.O_TMPFILE &^ unix.O_DIRECTORY

// openWriteFlags may not appear in openat's flags (argument 2). Each is a
// single bit, so "none of them set" is exactly "a read-only open".
const openWriteFlags = unix.O_WRONLY | unix.O_RDWR | unix.O_CREAT | unix.O_TRUNC | unix.O_APPEND | oTmpfileOnly

// cloneNamespaceFlags may not accompany CLONE_THREAD in clone's flags.
const cloneNamespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
	unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

func argEq(arg uint32, v uint64) seccomp.Condition {
	return seccomp.Condition{Argument: arg, Operation: seccomp.Equal, Value: v}
}

// conditionalSyscalls are allowed only with the given arguments. Several
// entries for one name are alternatives; conditions within one entry all hold.
func conditionalSyscalls(pid int) []seccomp.NameWithConditions {
	nc := func(name string, conds ...seccomp.Condition) seccomp.NameWithConditions {
		return seccomp.NameWithConditions{Name: name, Conditions: conds}
	}
	fcntl := func(cmd uint64) seccomp.NameWithConditions { return nc("fcntl", argEq(1, cmd)) }
	sockopt := func(level, opt uint64) seccomp.NameWithConditions {
		return nc("setsockopt", argEq(1, level), argEq(2, opt))
	}
	return []seccomp.NameWithConditions{
		// Threads only: the runtime's clone always has CLONE_THREAD; a new
		// process or namespace is refused.
		nc("clone",
			seccomp.Condition{Argument: 0, Operation: seccomp.BitsSet, Value: unix.CLONE_THREAD},
			seccomp.Condition{Argument: 0, Operation: seccomp.BitsNotSet, Value: cloneNamespaceFlags}),
		// Signals only to this process: tgkill(getpid(), tid, SIGURG) for
		// preemption, kill(getpid(), sig) when the runtime re-raises a fatal
		// signal. pid is the worker's pid in its own pid namespace.
		nc("tgkill", argEq(0, uint64(pid))),
		nc("kill", argEq(0, uint64(pid))),
		// Memory is never made executable.
		nc("mmap", seccomp.Condition{Argument: 2, Operation: seccomp.BitsNotSet, Value: unix.PROT_EXEC}),
		nc("mprotect", seccomp.Condition{Argument: 2, Operation: seccomp.BitsNotSet, Value: unix.PROT_EXEC}),
		// prctl: the runtime names its mappings (Go ≥ 1.25); Apply verifies
		// the filter with PR_GET_SECCOMP.
		nc("prctl", argEq(0, unix.PR_SET_VMA)),
		nc("prctl", argEq(0, unix.PR_GET_SECCOMP)),
		// Read-only opens (os.Root uses openat relative to its descriptor).
		nc("openat", seccomp.Condition{Argument: 2, Operation: seccomp.BitsNotSet, Value: openWriteFlags}),
		// fcntl: os.NewFile and net.FileConn (F_GETFL, F_SETFL, F_DUPFD_CLOEXEC),
		// close-on-exec bookkeeping (F_GETFD, F_SETFD).
		fcntl(unix.F_GETFD), fcntl(unix.F_SETFD), fcntl(unix.F_GETFL), fcntl(unix.F_DUPFD_CLOEXEC),
		// F_SETFL only with O_NONBLOCK set (net.FileConn sets it). The flag
		// belongs to the open file description, which a connection's copy
		// shares with the supervisor's and with the next worker's: cleared,
		// their plain reads and writes would wait on the client. The os
		// package clears it too, on a regular file opened without
		// O_NONBLOCK once the poller refuses the file, so a worker opens
		// files with O_NONBLOCK (worker/static).
		nc("fcntl", argEq(1, unix.F_SETFL), seccomp.Condition{Argument: 2, Operation: seccomp.BitsSet, Value: unix.O_NONBLOCK}),
		// setsockopt: what net.FileConn sets on a TCP connection.
		sockopt(unix.SOL_SOCKET, unix.SO_KEEPALIVE),
		sockopt(unix.IPPROTO_TCP, unix.TCP_NODELAY),
		sockopt(unix.IPPROTO_TCP, unix.TCP_KEEPIDLE),
		sockopt(unix.IPPROTO_TCP, unix.TCP_KEEPINTVL),
		sockopt(unix.IPPROTO_TCP, unix.TCP_KEEPCNT),
	}
}

// errnoENOSYS makes a group return ENOSYS. elastic ORs EPERM into a bare
// ActionErrno, but passes any other action value through unchanged.
const errnoENOSYS = seccomp.ActionErrno | seccomp.Action(unix.ENOSYS)

// seccompPolicy returns the worker's filter policy. Everything else — among
// it socket, socketpair, connect, bind, listen, accept4, execve, execveat,
// ptrace, process_vm_readv/writev, mount, umount2, pivot_root, chroot,
// unshare, setns, chmod/fchmod/chown, unlinkat, renameat, mkdirat, ioctl and
// the setuid family — takes the default action.
func seccompPolicy(action SeccompAction, pid int) seccomp.Policy {
	def := seccomp.ActionKillProcess
	if action == Log {
		def = seccomp.ActionLog
	}
	var allow []string
	allow = append(allow, runtimeSyscalls...)
	allow = append(allow, netpollSyscalls...)
	allow = append(allow, ioSyscalls...)
	allow = append(allow, fileSyscalls...)
	return seccomp.Policy{
		DefaultAction: def,
		Syscalls: []seccomp.SyscallGroup{
			{Action: seccomp.ActionAllow, Names: allow},
			{Action: seccomp.ActionAllow, NamesWithCondtions: conditionalSyscalls(pid)},
			// clone3 takes its flags in memory, which a filter cannot read.
			// Refuse it with ENOSYS so that a libc or runtime probing for it
			// falls back to clone (Go 1.26 creates threads with clone).
			{Action: errnoENOSYS, Names: []string{"clone3"}},
		},
	}
}

// applySeccomp loads the filter on all threads and checks that it is in
// force: elastic ignores seccomp(2)'s return value, which with plain TSYNC is
// the id of a thread that could not be synchronised; TSYNC_ESRCH turns that
// into an error, and PR_GET_SECCOMP confirms this thread is filtered.
func applySeccomp(p Policy) Layer {
	l := Layer{Name: "seccomp"}
	filter := seccomp.Filter{
		NoNewPrivs: true,
		Flag:       seccomp.FilterFlagTSync | seccomp.FilterFlag(unix.SECCOMP_FILTER_FLAG_TSYNC_ESRCH),
		Policy:     seccompPolicy(p.SeccompAction, os.Getpid()),
	}
	// LoadFilter sets no_new_privs and installs the filter on the calling
	// thread, which must not change in between.
	runtime.LockOSThread()
	err := seccomp.LoadFilter(filter)
	mode, merr := sys.SeccompMode()
	runtime.UnlockOSThread()
	switch {
	case err != nil:
		l.Detail = fmt.Sprintf("loading filter: %v", err)
	case merr != nil:
		l.Detail = fmt.Sprintf("verifying filter: %v", merr)
	case mode != 2:
		l.Detail = fmt.Sprintf("filter not in force after loading (seccomp mode %d)", mode)
	case p.SeccompAction == Log:
		// Loaded, but a call off the list only goes to the audit log.
		l.Detail = "allow-list on all threads with default action log: logs, does not enforce"
	default:
		l.Applied = true
		l.Detail = fmt.Sprintf("allow-list on all threads, default action %s", p.SeccompAction)
	}
	return l
}
