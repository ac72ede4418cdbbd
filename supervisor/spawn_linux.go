package supervisor

import (
	"syscall"

	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/sandbox"
)

// spawnLayers reports the namespaces a worker is spawned into.
func spawnLayers(attr *syscall.SysProcAttr, missing []sandbox.Layer) []*proto.SandboxLayer {
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
