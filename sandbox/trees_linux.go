package sandbox

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Document roots reach a worker as descriptors (Policy.RootFDs), so that its
// account needs permission on each root itself only: the supervisor opens
// them while it can (docs/DESIGN.md §5). A worker with user and mount
// namespaces of its own cannot bind a directory opened in another mount
// namespace (open_tree and mount refuse it), and it cannot reach the root by
// path through directories it may not search. The kernel carries one thing
// across: the working directory of a process that creates a mount namespace
// is moved into the new one. So for each root, RootTrees starts a helper
// whose working directory is the root, in user and mount namespaces of its
// own; the helper clones the tree mounted there (open_tree), makes it
// read-only and sends back the detached copy, which the worker moves into
// its new root.

// OpenRootDir opens a document root as an O_PATH directory descriptor, to
// pass to workers (close-on-exec).
func OpenRootDir(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// NeedsRootTrees reports whether a worker spawned with attr gets user and
// mount namespaces of its own, so that its roots must be passed as trees.
func NeedsRootTrees(attr *syscall.SysProcAttr) bool {
	const both = syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS
	return attr.Cloneflags&both == both
}

// RootTrees returns a detached read-only mount tree of each root (O_PATH
// directories) for a worker spawned with attr (NeedsRootTrees), made by one
// helper process each: exe with args, which runs ExportTreeMain. The caller
// owns the trees; each can be attached once.
func RootTrees(exe string, args []string, attr *syscall.SysProcAttr, roots []*os.File) ([]*os.File, error) {
	var trees []*os.File
	for _, r := range roots {
		t, err := rootTree(exe, args, attr, r)
		if err != nil {
			for _, t := range trees {
				t.Close()
			}
			return nil, fmt.Errorf("sandbox: mount tree of root %s: %w", r.Name(), err)
		}
		trees = append(trees, t)
	}
	return trees, nil
}

// rootTree runs one helper from a thread of its own whose working directory
// is root; the thread ends with the helper (it is never unlocked), so no
// other goroutine runs in that directory.
func rootTree(exe string, args []string, attr *syscall.SysProcAttr, root *os.File) (*os.File, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socketpair", err)
	}
	defer unix.Close(pair[0])
	theirs := os.NewFile(uintptr(pair[1]), "tree")
	var stderr bytes.Buffer
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer theirs.Close()
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			done <- os.NewSyscallError("unshare", err)
			return
		}
		if err := unix.Fchdir(int(root.Fd())); err != nil {
			done <- os.NewSyscallError("fchdir", err)
			return
		}
		cmd := &exec.Cmd{
			Path:       exe,
			Args:       append([]string{exe}, args...),
			Env:        []string{},
			Stderr:     &stderr,
			ExtraFiles: []*os.File{theirs}, // fd 3
			SysProcAttr: &syscall.SysProcAttr{
				Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
				UidMappings:                attr.UidMappings,
				GidMappings:                attr.GidMappings,
				GidMappingsEnableSetgroups: attr.GidMappingsEnableSetgroups,
				Credential:                 attr.Credential,
				Pdeathsig:                  syscall.SIGKILL,
			},
		}
		err := Start(cmd)
		if err == nil {
			err = cmd.Wait()
		}
		done <- err
	}()
	if err := <-done; err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			err = fmt.Errorf("%w: %s", err, msg)
		}
		return nil, err
	}
	buf, oob := make([]byte, 1), make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(pair[0], buf, oob, unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("helper sent no tree: %w", os.NewSyscallError("recvmsg", err))
	}
	var fds []int
	if cms, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for i := range cms {
			if r, err := unix.ParseUnixRights(&cms[i]); err == nil {
				fds = append(fds, r...)
			}
		}
	}
	if len(fds) != 1 {
		closeAll(fds)
		return nil, fmt.Errorf("helper sent %d descriptors, want 1", len(fds))
	}
	return os.NewFile(uintptr(fds[0]), root.Name()), nil
}

// ExportTreeMain is the helper RootTrees starts: its working directory is
// a document root, moved into its own mount namespace, whose tree it clones
// detached and read-only and sends on fd 3. It returns the exit status.
func ExportTreeMain() int {
	t, err := unix.OpenTree(unix.AT_FDCWD, ".", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		fmt.Fprintln(os.Stderr, os.NewSyscallError("open_tree", err))
		return 1
	}
	attr := unix.MountAttr{Attr_set: rootMountAttrs}
	if err := unix.MountSetattr(t, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		fmt.Fprintln(os.Stderr, os.NewSyscallError("mount_setattr", err))
		return 1
	}
	if err := unix.Sendmsg(3, []byte{'t'}, unix.UnixRights(t), nil, 0); err != nil {
		fmt.Fprintln(os.Stderr, os.NewSyscallError("sendmsg", err))
		return 1
	}
	return 0
}
