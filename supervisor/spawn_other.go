//go:build !linux

package supervisor

import (
	"syscall"

	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/sandbox"
)

// spawnLayers reports the layers the sandbox could not arrange at spawn;
// outside Linux a worker is not spawned into namespaces.
func spawnLayers(_ *syscall.SysProcAttr, missing []sandbox.Layer) []*proto.SandboxLayer {
	var out []*proto.SandboxLayer
	for _, l := range missing {
		out = append(out, &proto.SandboxLayer{Name: l.Name, Detail: l.Detail})
	}
	return out
}

// sysAdminCap is empty: this system has no capabilities.
var sysAdminCap []uintptr

// separatesProcesses reports true: outside Linux the worker's pledge (no
// "proc") forbids signalling or tracing another process.
func separatesProcesses(*syscall.SysProcAttr) bool { return true }

// attrWithCloneflags is empty attributes: this system has no namespaces.
func attrWithCloneflags(uint64) *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
