package sandbox

import (
	"fmt"
	"os"
	"strings"
)

// Apply confines the calling process. The worker calls it once, after it has
// opened its document roots and before it reads its first frame. It applies
// every layer it can, in the order of docs/DESIGN.md §5, and returns one Layer each.
// In Strict mode it returns a *NotAppliedError if any layer did not apply;
// the worker must then exit without serving. Apply is irreversible: after
// it returns, the process cannot open files outside its roots, create
// sockets, exec, or regain privilege, whatever the error.
//
// Apply does not close or take ownership of any descriptor the caller holds,
// p.RootFDs included; in its own user namespace it moves each of those
// detached trees to its place in the new root.
func Apply(p Policy) ([]Layer, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if cgoBuild {
		return nil, ErrCgo
	}
	// Everything that needs a path outside the roots happens before chroot.
	inInitNS, nsErr := inInitialUserNS()
	uidMap := readIDMap("/proc/self/uid_map")
	uid, gid, userErr := lookupUser(p.User)
	rootFDs, trees, rootErr := p.RootFDs, len(p.RootFDs) > 0, error(nil)
	if !trees {
		rootFDs, rootErr = openRoots(p.Roots)
		defer closeAll(rootFDs)
	}

	var layers []Layer
	switch {
	case nsErr == nil && !inInitNS && rootErr == nil:
		layers = append(layers, applyPivotRoot(p.Roots, rootFDs, trees))
	default:
		// In the initial user namespace the mount namespace may be the
		// host's: never pivot it. A chroot confines paths, but not a
		// descriptor opened before it; Landlock is then the only guard.
		layers = append(layers, applyChroot(p.Chroot), Layer{Name: pivotRootLayer,
			Detail: "no user namespace: chroot only; without Landlock a root descriptor can reach the host's files with \"..\""})
	}
	switch {
	case nsErr != nil:
		layers = append(layers, Layer{Name: "identity", Detail: fmt.Sprintf("reading uid map: %v", nsErr)})
	case inInitNS && userErr != nil && os.Geteuid() == 0:
		layers = append(layers, Layer{Name: "identity", Detail: userErr.Error()})
	default:
		layers = append(layers, applyIdentity(inInitNS, uidMap, uid, gid))
	}
	layers = append(layers, applyNoNewPrivs(), applyNotDumpable(), applyRlimits())
	switch {
	case rootErr != nil:
		layers = append(layers, Layer{Name: "landlock", Detail: rootErr.Error()})
	case p.noLandlock:
		layers = append(layers, Layer{Name: "landlock", Detail: "skipped by the test"})
	default:
		layers = append(layers, applyLandlock(p.Roots, rootFDs))
	}
	layers = append(layers, applySeccomp(p))
	return layers, p.check(layers)
}

func readIDMap(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b)), " ")
}
