// Package roots opens the static roots the supervisor hands to each worker
// as descriptors (docs/DESIGN.md §5): the workers' account needs to list
// and search a root itself, not the directories above it. The supervisor
// opens them while it can: at start, before it drops privileges, and at a
// reload as its own account. A root it can no longer open at a reload keeps
// the directory opened before for the same path; a root a reload adds must
// be open to the supervisor's account.
package roots

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/sandbox"
	"golang.org/x/sys/unix"
)

// Paths are the distinct static roots of cfg, in route order, then the
// directories its error pages are read through: the workers' sandbox policy
// names them in this order.
func Paths(cfg *config.Config) []string {
	var roots []string
	for _, r := range cfg.Routes {
		if r.Static != nil && !slices.Contains(roots, r.Static.Root) {
			roots = append(roots, r.Static.Root)
		}
	}
	return append(roots, cfg.ErrorPageRoots()...)
}

// Held are the roots' directories (O_PATH) by path, kept for a reload that
// can no longer open them. A nil *Held: workers open their roots by path.
// The caller serialises its use.
type Held struct {
	files map[string]*os.File
}

// Open opens every root of cfg (at start, before privileges drop). It
// returns nil where workers open their roots by path (no O_PATH).
func Open(cfg *config.Config) (*Held, error) {
	h := &Held{files: map[string]*os.File{}}
	for _, path := range Paths(cfg) {
		f, err := sandbox.OpenRootDir(path)
		if err != nil {
			h.Close()
			return nil, fmt.Errorf("static root: %w", err)
		}
		if f == nil {
			return nil, nil
		}
		h.files[path] = f
	}
	return h, nil
}

// Close closes the directories held.
func (h *Held) Close() {
	if h == nil {
		return
	}
	closeAll(h.files)
	h.files = nil
}

func closeAll(m map[string]*os.File) {
	for _, f := range m {
		f.Close()
	}
}

// Files returns the O_PATH directory of each of paths: opened again, so
// that a reload sees a directory replaced at the path, or else, where the
// supervisor's account may no longer reach it, the one held for the path.
// account is the supervisor's, for the error. nil: workers open their roots
// by path.
func (h *Held) Files(paths []string, account sandbox.Account) ([]*os.File, error) {
	if h == nil {
		return nil, nil
	}
	files := make([]*os.File, 0, len(paths))
	for _, path := range paths {
		f, err := h.Open(path, account)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// Open opens one root as Files does; it is also the configuration check's
// (config.ParseOptions.OpenRoot), which closes what it gets.
func (h *Held) Open(path string, account sandbox.Account) (*os.File, error) {
	f, err := sandbox.OpenRootDir(path)
	if err == nil || !errors.Is(err, fs.ErrPermission) {
		return f, err
	}
	held := h.files[path]
	if held == nil {
		return nil, fmt.Errorf("%w; the supervisor, now running as %s, cannot reach it: a static root added by a reload must be open to its account (a restart opens it as root)", err, account)
	}
	fd, derr := unix.FcntlInt(held.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if derr != nil {
		return nil, os.NewSyscallError("fcntl", derr)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// Keep keeps a copy of files, the directories of paths, for the next
// reload, in place of the ones held so far.
func (h *Held) Keep(files []*os.File, paths []string) error {
	if h == nil {
		return nil
	}
	held := make(map[string]*os.File, len(files))
	for i, f := range files {
		fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			closeAll(held)
			return os.NewSyscallError("fcntl", err)
		}
		held[paths[i]] = os.NewFile(uintptr(fd), f.Name())
	}
	closeAll(h.files)
	h.files = held
	return nil
}
