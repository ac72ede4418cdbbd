package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"
)

// pivotBases are the directories, tried in order, on which the new root is
// built. The tmpfs mounted there is visible only in the worker's own mount
// namespace and nothing is left behind on the host.
var pivotBases = []string{"/tmp", "/mnt", "/run"}

// rootMountAttrs are set on every document root bound into the new root.
const rootMountAttrs = unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC

// applyPivotRoot makes an empty, read-only tmpfs the root of the worker's
// mount namespace, with each document root bound read-only at its own path
// inside it, and detaches the old root. A descriptor opened before still
// points into the detached tree and can climb out of it with "..": the
// caller must reopen its roots (see RootsRebound) and close the old ones.
// It needs CAP_SYS_ADMIN over the mount namespace, which the worker holds as
// root of its own user namespace; in the initial user namespace Apply uses
// applyChroot instead, since the mount namespace may be the host's.
//
// With trees, each of rootFDs is a detached mount tree (RootTrees), moved
// into place: a descriptor of a directory opened in another mount namespace
// cannot be bound in this one.
func applyPivotRoot(roots []string, rootFDs []int, trees bool) Layer {
	l := Layer{Name: pivotRootLayer}
	fail := func(what string, err error) Layer {
		l.Detail = fmt.Sprintf("%s: %v", what, err)
		return l
	}
	// Nothing done below may propagate to the parent namespace.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fail("making mounts private", os.NewSyscallError("mount", err))
	}
	base := ""
	for _, b := range pivotBases {
		if st, err := os.Stat(b); err == nil && st.IsDir() {
			base = b
			break
		}
	}
	if base == "" {
		l.Detail = fmt.Sprintf("none of %v is a directory to build the new root on", pivotBases)
		return l
	}
	if err := unix.Mount("tmpfs", base, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=64k,nr_inodes=1024"); err != nil {
		return fail("mounting tmpfs on "+base, os.NewSyscallError("mount", err))
	}
	// Shorter paths first, so that a root nested in another is bound on
	// the directory the outer bind shows.
	order := make([]int, len(roots))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return len(roots[a]) - len(roots[b]) })
	for _, i := range order {
		target := filepath.Join(base, roots[i])
		if err := os.MkdirAll(target, 0o755); err != nil {
			return fail("creating mount point for "+roots[i], err)
		}
		if err := bindReadOnly(rootFDs[i], target, trees); err != nil {
			return fail("binding "+roots[i], err)
		}
	}
	if err := unix.Chdir(base); err != nil {
		return fail("entering the new root", os.NewSyscallError("chdir", err))
	}
	// pivot_root(".", ".") stacks the old root on the new one; unmounting
	// "." then detaches it (pivot_root(2), NOTES).
	if err := unix.PivotRoot(".", "."); err != nil {
		return fail("pivot_root", os.NewSyscallError("pivot_root", err))
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fail("detaching the old root", os.NewSyscallError("umount2", err))
	}
	if err := unix.Chdir("/"); err != nil {
		return fail("entering /", os.NewSyscallError("chdir", err))
	}
	if err := unix.MountSetattr(unix.AT_FDCWD, "/", 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return fail("making the new root read-only", os.NewSyscallError("mount_setattr", err))
	}
	l.Applied = true
	l.Detail = fmt.Sprintf("empty read-only tmpfs, %d root(s) bound read-only, old root detached", len(roots))
	return l
}

// bindReadOnly attaches a read-only copy of the mount tree at fd (the root
// and every mount below it) on target; with tree, fd is a detached tree,
// made read-only and attached itself.
func bindReadOnly(fd int, target string, tree bool) error {
	if !tree {
		t, err := unix.OpenTree(fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
		if err != nil {
			return os.NewSyscallError("open_tree", err)
		}
		defer unix.Close(t)
		fd = t
	}
	attr := unix.MountAttr{Attr_set: rootMountAttrs}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		return os.NewSyscallError("mount_setattr", err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return os.NewSyscallError("move_mount", err)
	}
	return nil
}
