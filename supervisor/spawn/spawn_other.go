//go:build !linux

package spawn

import (
	"syscall"

	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/sandbox"
)

// Layers reports the layers the sandbox could not arrange at spawn;
// outside Linux a worker is not spawned into namespaces.
func Layers(_ *syscall.SysProcAttr, missing []sandbox.Layer) []*proto.SandboxLayer {
	var out []*proto.SandboxLayer
	for _, l := range missing {
		out = append(out, &proto.SandboxLayer{Name: l.Name, Detail: l.Detail})
	}
	return out
}

// SysAdminCap is empty: this system has no capabilities.
var SysAdminCap []uintptr

// SeparatesProcesses reports true: outside Linux the worker's pledge (no
// "proc") forbids signalling or tracing another process.
func SeparatesProcesses(*syscall.SysProcAttr) bool { return true }

// AttrWithCloneflags is empty attributes: this system has no namespaces.
func AttrWithCloneflags(uint64) *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
