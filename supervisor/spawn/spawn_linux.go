package spawn

import (
	"syscall"

	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/sandbox"
	"golang.org/x/sys/unix"
)

// Layers reports the namespaces a worker is spawned into.
func Layers(attr *syscall.SysProcAttr, missing []sandbox.Layer) []*proto.SandboxLayer {
	var out []*proto.SandboxLayer
	for _, ns := range []struct {
		name string
		flag uintptr
	}{{"user", syscall.CLONE_NEWUSER}, {"mnt", syscall.CLONE_NEWNS}, {"pid", syscall.CLONE_NEWPID}, {"net", syscall.CLONE_NEWNET}, {"ipc", syscall.CLONE_NEWIPC}, {"uts", syscall.CLONE_NEWUTS}} {
		if attr.Cloneflags&ns.flag != 0 {
			out = append(out, &proto.SandboxLayer{Name: "namespace/" + ns.name, Applied: true})
		}
	}
	for _, l := range missing {
		out = append(out, &proto.SandboxLayer{Name: l.Name, Detail: l.Detail})
	}
	return out
}

// SysAdminCap is what the spawner keeps where its account may not create
// user namespaces.
var SysAdminCap = []uintptr{unix.CAP_SYS_ADMIN}

// SeparatesProcesses reports whether workers spawned with attr can neither
// see nor signal the supervisor although they share its uid: their own user
// and pid namespaces.
func SeparatesProcesses(attr *syscall.SysProcAttr) bool {
	return attr.Cloneflags&syscall.CLONE_NEWUSER != 0 && attr.Cloneflags&syscall.CLONE_NEWPID != 0
}

// AttrWithCloneflags is the attributes a spawner reported, for the layers.
func AttrWithCloneflags(flags uint64) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Cloneflags: uintptr(flags)}
}
