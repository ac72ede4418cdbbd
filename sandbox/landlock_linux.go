package sandbox

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gatehouse-dev/gatehouse/sandbox/internal/sys"
)

// Landlock access rights by the ABI version that introduced them.
const (
	llFSv1 = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR |
		unix.LANDLOCK_ACCESS_FS_REMOVE_DIR | unix.LANDLOCK_ACCESS_FS_REMOVE_FILE |
		unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_DIR |
		unix.LANDLOCK_ACCESS_FS_MAKE_REG | unix.LANDLOCK_ACCESS_FS_MAKE_SOCK |
		unix.LANDLOCK_ACCESS_FS_MAKE_FIFO | unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK |
		unix.LANDLOCK_ACCESS_FS_MAKE_SYM
	llFSv2 = llFSv1 | unix.LANDLOCK_ACCESS_FS_REFER
	llFSv3 = llFSv2 | unix.LANDLOCK_ACCESS_FS_TRUNCATE
	llFSv5 = llFSv3 | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	llNet  = unix.LANDLOCK_ACCESS_NET_BIND_TCP | unix.LANDLOCK_ACCESS_NET_CONNECT_TCP // ABI 4
	// llRead is all the worker may do beneath a document root.
	llRead = unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR
	// llErrataSignalScope is the erratum fixing signal scoping (ABI 6).
	llErrataSignalScope = 1 << 1
	// llMaxABI is the newest ABI whose rights this file knows.
	llMaxABI = 7
)

// landlockRights returns the rights to handle for a kernel ABI version.
func landlockRights(abi int, errata uint64) (fs, net, scoped uint64) {
	switch {
	case abi >= 5:
		fs = llFSv5
	case abi >= 3:
		fs = llFSv3
	case abi == 2:
		fs = llFSv2
	case abi == 1:
		fs = llFSv1
	}
	if abi >= 4 {
		net = llNet
	}
	if abi >= 6 {
		scoped = unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
		if errata&llErrataSignalScope != 0 {
			scoped |= unix.LANDLOCK_SCOPE_SIGNAL
		}
	}
	return fs, net, scoped
}

// openRoots opens every root as an O_PATH directory descriptor. Landlock
// rules name inodes through descriptors, so they can be added after chroot
// has made the roots' paths unreachable.
func openRoots(roots []string) ([]int, error) {
	fds := make([]int, 0, len(roots))
	for _, r := range roots {
		fd, err := unix.Open(r, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			closeAll(fds)
			return nil, fmt.Errorf("opening root %s: %w", r, os.NewSyscallError("open", err))
		}
		fds = append(fds, fd)
	}
	return fds, nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// applyLandlock restricts every thread to reading beneath rootFDs, with no
// TCP bind/connect and (ABI ≥ 6) no abstract-socket or signal IPC outside
// the domain. Every thread must already have no_new_privs.
func applyLandlock(roots []string, rootFDs []int) Layer {
	l := Layer{Name: "landlock"}
	abi, err := sys.LandlockABI()
	if err != nil {
		l.Detail = fmt.Sprintf("kernel lacks Landlock: %v", err)
		return l
	}
	errata, _ := sys.LandlockErrata()
	fs, net, scoped := landlockRights(min(abi, llMaxABI), errata)
	rs, err := sys.LandlockCreateRuleset(fs, net, scoped)
	if err != nil {
		l.Detail = err.Error()
		return l
	}
	defer unix.Close(rs)
	for i, fd := range rootFDs {
		if err := sys.LandlockAddPathBeneath(rs, fd, llRead); err != nil {
			l.Detail = fmt.Sprintf("adding rule for %s: %v", roots[i], err)
			return l
		}
	}
	if err := sys.AllThreadsLandlockRestrictSelf(rs); err != nil {
		l.Detail = err.Error()
		if errors.Is(err, unix.ENOTSUP) {
			l.Detail += " (binary uses cgo: build the worker with CGO_ENABLED=0)"
		}
		return l
	}
	var what []string
	what = append(what, fmt.Sprintf("ABI %d, read-only beneath %d root(s)", abi, len(rootFDs)))
	if net != 0 {
		what = append(what, "no TCP bind/connect")
	}
	if scoped != 0 {
		what = append(what, "scoped IPC")
	}
	l.Applied = true
	l.Detail = strings.Join(what, ", ")
	return l
}
