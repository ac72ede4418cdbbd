// Package sandbox confines gatehouse worker processes.
//
// The supervisor calls [SpawnAttr] to start a worker in fresh namespaces and
// passes [Policy.Args] on the worker's command line; the worker decodes them
// with [ParseArgs], opens its document roots and calls [Apply] before it reads
// its first frame. On Linux, Apply runs these layers in order (docs/DESIGN.md §5):
//
//	pivot_root    into an empty read-only tmpfs holding read-only binds of the
//	              roots at their own paths, the old root detached; the worker
//	              then reopens its roots there (RootsRebound). Without a user
//	              namespace of its own: chroot to an empty, already deleted
//	              directory (or Policy.Chroot) instead
//	identity      drop to an unprivileged uid/gid and clear every capability
//	no_new_privs  PR_SET_NO_NEW_PRIVS on every thread
//	dumpable      PR_SET_DUMPABLE 0
//	rlimits       RLIMIT_CORE 0, RLIMIT_FSIZE 0 (unlimited for a worker given
//	              an access log file to append to), RLIMIT_NOFILE 4096
//	landlock      read-only access beneath the roots, no TCP bind/connect, scoped IPC
//	seccomp       allow-list (see seccomp_linux.go), default kill-process, TSYNC
//
// On OpenBSD, Apply unveils the roots read-only and pledges
// "stdio recvfd sendfd rpath". Other systems have no sandbox: Apply fails in
// [Strict] mode and reports every layer as not applied in [BestEffort] mode.
//
// Scope and non-goals: the package confines a process that has already
// opened what it needs (its IPC socket, its document roots). It does not
// manage the worker's lifetime, its descriptors, or its IPC, and it does not
// try to sandbox the supervisor. Raw system calls live in
// sandbox/internal/sys; this package holds the policy.
//
// Build requirement (Linux): Landlock and the capability drop must reach
// every OS thread, which Go can only do without cgo
// (syscall.AllThreadsSyscall). Build the worker with CGO_ENABLED=0 (or with
// the netgo and osusergo tags so that no package links cgo); otherwise those
// layers report "not applied" and Strict mode refuses to start.
package sandbox
