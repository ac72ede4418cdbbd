package sandbox

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// MaxRootFDs bounds the roots passed to a worker as descriptors: one
// SCM_RIGHTS message carries at most 253 (SCM_MAX_FD), and the spawner's
// also carries the worker's channel and output pipe.
const MaxRootFDs = 251

// Mode says what happens when a layer cannot be applied.
type Mode int

const (
	// Strict refuses to run a worker whose layers did not all apply.
	Strict Mode = iota
	// BestEffort applies what the kernel allows and reports the rest.
	BestEffort
)

// String returns the configuration spelling: "strict" or "best-effort".
func (m Mode) String() string {
	switch m {
	case Strict:
		return "strict"
	case BestEffort:
		return "best-effort"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode parses "strict" or "best-effort".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "strict":
		return Strict, nil
	case "best-effort":
		return BestEffort, nil
	}
	return 0, fmt.Errorf("sandbox: unknown mode %q (want \"strict\" or \"best-effort\")", s)
}

// SeccompAction is what the seccomp filter does with a system call that is
// not on the allow-list.
type SeccompAction int

const (
	// Kill kills the whole process (SECCOMP_RET_KILL_PROCESS); the supervisor
	// sees the worker die by SIGSYS.
	Kill SeccompAction = iota
	// Log lets the call through and logs it to the audit log
	// (SECCOMP_RET_LOG). For diagnosing the allow-list only: it enforces
	// nothing, so a Strict policy refuses it and a BestEffort one reports
	// the seccomp layer as not applied.
	Log
)

// String returns "kill" or "log".
func (a SeccompAction) String() string {
	switch a {
	case Kill:
		return "kill"
	case Log:
		return "log"
	}
	return fmt.Sprintf("SeccompAction(%d)", int(a))
}

// ParseSeccompAction parses "kill" or "log".
func ParseSeccompAction(s string) (SeccompAction, error) {
	switch s {
	case "kill":
		return Kill, nil
	case "log":
		return Log, nil
	}
	return 0, fmt.Errorf("sandbox: unknown seccomp action %q (want \"kill\" or \"log\")", s)
}

// Policy describes a worker's sandbox. It is an immutable value: the builder
// methods return modified copies and never share the Roots slice. The zero
// value is the default: Strict, Kill, no roots, user nobody, private chroot.
type Policy struct {
	Mode          Mode
	SeccompAction SeccompAction
	// Roots are absolute, clean document roots the worker may read (and
	// nothing else).
	Roots []string
	// RootFDs, when set, are descriptors the worker inherited for Roots,
	// one each in the same order: detached read-only mount trees of them
	// (RootTrees) when the worker has user and mount namespaces of its own,
	// else O_PATH directories. Apply then uses them instead of opening the
	// paths, so that the workers' account needs read and search permission
	// on each root itself only, not on the directories above it. Apply
	// does not close them.
	RootFDs []int
	// User is the account the worker runs as when the supervisor runs as
	// root: a name from /etc/passwd, "uid" or "uid:gid". "" means
	// nobody (65534:65534).
	User string
	// Chroot is an existing empty directory to chroot into where the worker
	// has no user namespace of its own (otherwise it pivots into an empty
	// tmpfs). "" (the default)
	// makes the worker create a private directory under /tmp, enter it and
	// delete it, so that its root is an empty directory in which nothing can
	// ever be created.
	Chroot string

	// noLandlock skips the Landlock layer, so that tests can show what the
	// other layers hold alone. Never set outside tests.
	noLandlock bool
}

// WithMode returns a copy of p with the given mode.
func (p Policy) WithMode(m Mode) Policy { p = p.clone(); p.Mode = m; return p }

// BestEffort returns a copy of p in BestEffort mode.
func (p Policy) BestEffort() Policy { return p.WithMode(BestEffort) }

// WithSeccompAction returns a copy of p with the given seccomp default action.
func (p Policy) WithSeccompAction(a SeccompAction) Policy {
	p = p.clone()
	p.SeccompAction = a
	return p
}

// WithRoots returns a copy of p whose roots are roots (copied), opened by
// path.
func (p Policy) WithRoots(roots ...string) Policy {
	p = p.clone()
	p.Roots, p.RootFDs = cloneStrings(roots), nil
	return p
}

// WithRootFDs returns a copy of p whose roots are roots, inherited as fds
// (see RootFDs; both copied).
func (p Policy) WithRootFDs(roots []string, fds []int) Policy {
	p = p.WithRoots(roots...)
	if len(fds) > 0 {
		p.RootFDs = append([]int(nil), fds...)
	}
	return p
}

// WithUser returns a copy of p that runs as user.
func (p Policy) WithUser(user string) Policy {
	p = p.clone()
	p.User = user
	return p
}

// WithChroot returns a copy of p that chroots into dir.
func (p Policy) WithChroot(dir string) Policy {
	p = p.clone()
	p.Chroot = dir
	return p
}

// clone returns p with slices of its own.
func (p Policy) clone() Policy {
	p.Roots = cloneStrings(p.Roots)
	if p.RootFDs != nil {
		p.RootFDs = append([]int(nil), p.RootFDs...)
	}
	return p
}

func cloneStrings(s []string) []string {
	if s == nil {
		return nil
	}
	return append([]string(nil), s...)
}

// Validate reports whether p is well formed.
func (p Policy) Validate() error {
	if p.Mode != Strict && p.Mode != BestEffort {
		return fmt.Errorf("sandbox: invalid mode %v", p.Mode)
	}
	if p.SeccompAction != Kill && p.SeccompAction != Log {
		return fmt.Errorf("sandbox: invalid seccomp action %v", p.SeccompAction)
	}
	if p.Mode == Strict && p.SeccompAction == Log {
		return fmt.Errorf("sandbox: seccomp action %v enforces nothing and is refused in strict mode; %s", Log, bestEffortHint)
	}
	for _, r := range p.Roots {
		if err := checkAbs("root", r); err != nil {
			return err
		}
	}
	if len(p.RootFDs) > 0 {
		if len(p.RootFDs) != len(p.Roots) {
			return fmt.Errorf("sandbox: %d root descriptors for %d roots", len(p.RootFDs), len(p.Roots))
		}
		if len(p.RootFDs) > MaxRootFDs {
			return fmt.Errorf("sandbox: %d roots; at most %d distinct static roots can be passed to a worker", len(p.RootFDs), MaxRootFDs)
		}
		for i, fd := range p.RootFDs {
			if fd < 3 || slices.Contains(p.RootFDs[:i], fd) {
				return fmt.Errorf("sandbox: invalid root descriptor %d", fd)
			}
		}
	}
	if p.Chroot != "" {
		if err := checkAbs("chroot", p.Chroot); err != nil {
			return err
		}
	}
	if strings.ContainsAny(p.User, "\x00\n") {
		return fmt.Errorf("sandbox: invalid user %q", p.User)
	}
	return nil
}

func checkAbs(what, path string) error {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path || strings.ContainsRune(path, 0) {
		return fmt.Errorf("sandbox: %s %q is not an absolute clean path", what, path)
	}
	return nil
}

// Command-line flags written by Args. Every flag has the form -sandbox.K=V.
const (
	argPrefix  = "-sandbox."
	argMode    = "mode"
	argSeccomp = "seccomp"
	argRoot    = "root"
	argRootFD  = "root-fd"
	argUser    = "user"
	argChroot  = "chroot"
)

// Args encodes p as worker command-line arguments, each of the form
// "-sandbox.KEY=VALUE". ParseArgs(p.Args()) returns p.
func (p Policy) Args() []string {
	args := []string{
		argPrefix + argMode + "=" + p.Mode.String(),
		argPrefix + argSeccomp + "=" + p.SeccompAction.String(),
	}
	for _, r := range p.Roots {
		args = append(args, argPrefix+argRoot+"="+r)
	}
	for _, fd := range p.RootFDs {
		args = append(args, argPrefix+argRootFD+"="+strconv.Itoa(fd))
	}
	if p.User != "" {
		args = append(args, argPrefix+argUser+"="+p.User)
	}
	if p.Chroot != "" {
		args = append(args, argPrefix+argChroot+"="+p.Chroot)
	}
	return args
}

// IsArg reports whether a command-line argument belongs to the sandbox
// encoding, so that a worker can split its command line.
func IsArg(arg string) bool { return strings.HasPrefix(arg, argPrefix) }

// ParseArgs decodes arguments written by Policy.Args. Every argument must be
// a sandbox argument; unknown keys, repeated single-valued keys and invalid
// values are errors.
func ParseArgs(args []string) (Policy, error) {
	var p Policy
	seen := map[string]bool{}
	for _, a := range args {
		kv, ok := strings.CutPrefix(a, argPrefix)
		k, v, hasEq := strings.Cut(kv, "=")
		if !ok || !hasEq {
			return Policy{}, fmt.Errorf("sandbox: malformed argument %q (want -sandbox.KEY=VALUE)", a)
		}
		if k != argRoot && k != argRootFD {
			if seen[k] {
				return Policy{}, fmt.Errorf("sandbox: argument -sandbox.%s repeated", k)
			}
			seen[k] = true
		}
		var err error
		switch k {
		case argMode:
			p.Mode, err = ParseMode(v)
		case argSeccomp:
			p.SeccompAction, err = ParseSeccompAction(v)
		case argRoot:
			p.Roots = append(p.Roots, v)
		case argRootFD:
			var fd int
			if fd, err = strconv.Atoi(v); err == nil {
				p.RootFDs = append(p.RootFDs, fd)
			}
		case argUser:
			p.User = v
		case argChroot:
			p.Chroot = v
		default:
			err = fmt.Errorf("sandbox: unknown argument %q", a)
		}
		if err != nil {
			return Policy{}, err
		}
	}
	if err := p.Validate(); err != nil {
		return Policy{}, err
	}
	return p, nil
}

// Layer is one sandbox layer as reported in the worker's Ready frame.
type Layer struct {
	Name    string // "namespace/net", "chroot", "seccomp", …
	Applied bool
	Detail  string // what was done, or why not
}

func (l Layer) String() string {
	if l.Applied {
		return l.Name + ": " + l.Detail
	}
	return l.Name + ": NOT APPLIED: " + l.Detail
}

// pivotRootLayer names the layer that rebuilds the worker's filesystem;
// RootsRebound looks for it.
const pivotRootLayer = "pivot_root"

// RootsRebound reports whether Apply bound the document roots at their own
// paths in a new root (the pivot_root layer applied). The caller must then
// reopen each root by its path and close every descriptor of a root it
// opened before Apply: those point into the detached old root, from which
// ".." still climbs out.
func RootsRebound(layers []Layer) bool {
	for _, l := range layers {
		if l.Name == pivotRootLayer {
			return l.Applied
		}
	}
	return false
}

// ErrNotSupported is matched (errors.Is) by every error that reports a layer
// the kernel, the build or the privileges did not allow.
var ErrNotSupported = errors.New("sandbox: not supported")

// bestEffortHint is what an operator must write to run without a layer.
const bestEffortHint = `set sandbox { mode = "best-effort" } to run anyway`

// NotAppliedError is returned in Strict mode when layers did not apply.
type NotAppliedError struct {
	Layers []Layer // the layers that did not apply
}

func (e *NotAppliedError) Error() string {
	var b strings.Builder
	b.WriteString("sandbox: strict mode: layer")
	if len(e.Layers) > 1 {
		b.WriteString("s")
	}
	b.WriteString(" not applied: ")
	for i, l := range e.Layers {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(l.Name + " (" + l.Detail + ")")
	}
	b.WriteString("; " + bestEffortHint)
	return b.String()
}

// Is reports whether target is ErrNotSupported.
func (e *NotAppliedError) Is(target error) bool { return target == ErrNotSupported }

// check returns a *NotAppliedError in Strict mode if any layer failed.
func (p Policy) check(layers []Layer) error {
	if p.Mode != Strict {
		return nil
	}
	var failed []Layer
	for _, l := range layers {
		if !l.Applied {
			failed = append(failed, l)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return &NotAppliedError{Layers: failed}
}
