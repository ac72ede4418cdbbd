package supervisor

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

// Static roots are opened by the supervisor and handed to each worker as
// descriptors (docs/DESIGN.md §5): the workers' account needs to list and
// search a root itself, not the directories above it. The supervisor opens
// them while it can: at start, before it drops privileges, and at a reload
// as its own account. A root it can no longer open at a reload keeps the
// directory opened before for the same path; a root a reload adds must be
// open to the supervisor's account.

// configRoots are the distinct static roots of cfg, in route order, then
// the directories its error pages are read through: the workers' sandbox
// policy names them in this order.
func configRoots(cfg *config.Config) []string {
	var roots []string
	for _, r := range cfg.Routes {
		if r.Static != nil && !slices.Contains(roots, r.Static.Root) {
			roots = append(roots, r.Static.Root)
		}
	}
	return append(roots, cfg.ErrorPageRoots()...)
}

// openRoots opens every root of cfg (New, before privileges drop). It
// returns nil where workers open their roots by path (no O_PATH).
func openRoots(cfg *config.Config) (map[string]*os.File, error) {
	held := map[string]*os.File{}
	for _, path := range configRoots(cfg) {
		f, err := sandbox.OpenRootDir(path)
		if err != nil {
			closeRoots(held)
			return nil, fmt.Errorf("static root: %w", err)
		}
		if f == nil {
			return nil, nil
		}
		held[path] = f
	}
	return held, nil
}

func closeRoots(m map[string]*os.File) {
	for _, f := range m {
		f.Close()
	}
}

// rootFiles returns the O_PATH directory of each of roots: opened again,
// so that a reload sees a directory replaced at the path, or else, where
// the supervisor's account may no longer reach it, the one held for the
// path. nil: workers open their roots by path.
// +checklocks:s.reloadMu
func (s *Supervisor) rootFiles(roots []string) ([]*os.File, error) {
	if s.heldRoots == nil {
		return nil, nil
	}
	files := make([]*os.File, 0, len(roots))
	for _, path := range roots {
		f, err := s.openRoot(path)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// openRoot opens one root as rootFiles does; it is also the configuration
// check's (config.ParseOptions.OpenRoot), which closes what it gets.
// +checklocks:s.reloadMu
func (s *Supervisor) openRoot(path string) (*os.File, error) {
	f, err := sandbox.OpenRootDir(path)
	if err == nil || !errors.Is(err, fs.ErrPermission) {
		return f, err
	}
	held := s.heldRoots[path]
	if held == nil {
		return nil, fmt.Errorf("%w; the supervisor, now running as %s, cannot reach it: a static root added by a reload must be open to its account (a restart opens it as root)", err, s.account)
	}
	fd, derr := unix.FcntlInt(held.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if derr != nil {
		return nil, os.NewSyscallError("fcntl", derr)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// holdRoots keeps a copy of spec's roots for the next reload, in place of
// the ones held so far.
// +checklocks:s.reloadMu
func (s *Supervisor) holdRoots(spec *workerSpec) error {
	if s.heldRoots == nil {
		return nil
	}
	held := make(map[string]*os.File, len(spec.roots))
	for i, f := range spec.roots {
		fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			closeRoots(held)
			return os.NewSyscallError("fcntl", err)
		}
		held[spec.rootPaths[i]] = os.NewFile(uintptr(fd), f.Name())
	}
	closeRoots(s.heldRoots)
	s.heldRoots = held
	return nil
}
