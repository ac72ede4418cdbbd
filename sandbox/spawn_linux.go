package sandbox

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
)

// namespaces are the namespaces a worker gets, in report order.
var namespaces = []struct {
	name string
	flag uintptr
}{
	{"user", syscall.CLONE_NEWUSER},
	{"mount", syscall.CLONE_NEWNS},
	{"pid", syscall.CLONE_NEWPID},
	{"net", syscall.CLONE_NEWNET},
	{"ipc", syscall.CLONE_NEWIPC},
	{"uts", syscall.CLONE_NEWUTS},
}

// probePath is executed by the namespace probe. It must not exist: ENOENT
// from execve proves that the namespaces were created.
const probePath = "/nonexistent/gatehouse-namespace-probe"

// nsProbes caches, per effective uid, which namespaces the kernel allows.
// Probing forks a process per namespace, so it happens once; the effective
// uid is the key because the supervisor may drop privileges after binding.
var nsProbes struct {
	mu     sync.Mutex
	byEUID map[int]map[uintptr]error // +checklocks:mu
}

// SpawnAttr returns the SysProcAttr for the worker's exec.Cmd: new user,
// mount, pid, net, ipc and uts namespaces where the kernel allows them,
// namespace uid/gid 0 mapped to an unprivileged host account (p.User when
// the supervisor runs as root, else the supervisor's own ids), Pdeathsig
// SIGKILL and Setsid. It also returns the namespaces it could not arrange; in
// Strict mode any of those is an error instead.
//
// Pdeathsig fires when the thread that started the worker exits
// (golang/go#27505): start workers from a goroutine locked to its OS thread
// for the worker's lifetime, or rely on SysProcAttr.PidFD to track them.
// Start the worker as /proc/self/exe: the unprivileged host account may not
// be able to search the directories leading to the supervisor's binary.
func SpawnAttr(p Policy) (*syscall.SysProcAttr, []Layer, error) {
	if err := p.Validate(); err != nil {
		return nil, nil, err
	}
	root := os.Geteuid() == 0
	hostUID, hostGID := os.Geteuid(), os.Getegid()
	if root {
		var err error
		if hostUID, hostGID, err = lookupUser(p.User); err != nil {
			return nil, nil, err
		}
		if hostUID == 0 || hostGID == 0 {
			return nil, nil, fmt.Errorf("sandbox: user %q is privileged (uid %d gid %d); workers must run as an unprivileged account", p.User, hostUID, hostGID)
		}
	}
	avail := probeNamespaces(root)

	attr := &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	var missing []Layer
	for _, ns := range namespaces {
		if err := avail[ns.flag]; err != nil {
			missing = append(missing, Layer{Name: "namespace/" + ns.name, Detail: err.Error()})
			continue
		}
		attr.Cloneflags |= ns.flag
	}
	if attr.Cloneflags&syscall.CLONE_NEWUSER != 0 {
		attr.UidMappings, attr.GidMappings, attr.GidMappingsEnableSetgroups = idMaps(root, hostUID, hostGID)
		// Namespace root, so that the worker can chroot; Apply then clears
		// its capabilities. Groups is empty: with setgroups allowed (root
		// supervisor) Go clears the supplementary groups inherited from it.
		attr.Credential = &syscall.Credential{Uid: 0, Gid: 0}
	}
	if p.Mode == Strict && len(missing) > 0 {
		return nil, missing, &NotAppliedError{Layers: missing}
	}
	return attr, missing, nil
}

// idMaps maps namespace id 0 to the host account. Only root may enable
// setgroups in the namespace; an unprivileged supervisor must deny it.
func idMaps(root bool, uid, gid int) (u, g []syscall.SysProcIDMap, setgroups bool) {
	u = []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}}
	g = []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}}
	return u, g, root
}

// probeNamespaces reports, per clone flag, nil or why the kernel refused it.
func probeNamespaces(root bool) map[uintptr]error {
	euid := os.Geteuid()
	nsProbes.mu.Lock()
	defer nsProbes.mu.Unlock()
	if r, ok := nsProbes.byEUID[euid]; ok {
		return r
	}
	res := map[uintptr]error{}
	uid, gid := nobodyID, nobodyID
	if !root {
		uid, gid = euid, os.Getegid()
	}
	userErr := probe(syscall.CLONE_NEWUSER, root, uid, gid)
	res[syscall.CLONE_NEWUSER] = userErr
	for _, ns := range namespaces[1:] {
		flags := ns.flag
		if userErr == nil {
			flags |= syscall.CLONE_NEWUSER
		}
		res[ns.flag] = probe(flags, root, uid, gid)
	}
	if nsProbes.byEUID == nil {
		nsProbes.byEUID = map[int]map[uintptr]error{}
	}
	nsProbes.byEUID[euid] = res
	return res
}

// probe starts a child in the namespaces flags and lets it fail to exec a
// nonexistent file.
func probe(flags uintptr, root bool, uid, gid int) error {
	attr := &syscall.SysProcAttr{Cloneflags: flags}
	if flags&syscall.CLONE_NEWUSER != 0 {
		attr.UidMappings, attr.GidMappings, attr.GidMappingsEnableSetgroups = idMaps(root, uid, gid)
		attr.Credential = &syscall.Credential{Uid: 0, Gid: 0}
	}
	_, err := ForkExec(probePath, []string{probePath}, &syscall.ProcAttr{Env: []string{}, Sys: attr})
	switch {
	case errors.Is(err, syscall.ENOENT):
		return nil
	case err == nil:
		return fmt.Errorf("probe unexpectedly started %s", probePath)
	}
	return fmt.Errorf("kernel refused it: %w", err)
}
