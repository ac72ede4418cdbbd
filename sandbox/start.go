package sandbox

import (
	"os/exec"
	"sync"
	"syscall"
)

// startMu serialises this process's starts of child processes.
var startMu sync.Mutex

// Start starts cmd while no other child of this process is being started
// through Start or ForkExec. The runtime forks concurrently, and while a
// child is started in a new user namespace its parent writes the child's
// uid_map and gid_map through descriptors opened without close-on-exec
// (syscall.writeIDMappings): a child forked meanwhile inherited one across
// its exec, and a worker held another worker's uid_map open for writing.
// Every start in a process that starts workers goes through here.
func Start(cmd *exec.Cmd) error {
	startMu.Lock()
	defer startMu.Unlock()
	return cmd.Start()
}

// ForkExec is syscall.ForkExec under the same lock as Start.
func ForkExec(argv0 string, argv []string, attr *syscall.ProcAttr) (int, error) {
	startMu.Lock()
	defer startMu.Unlock()
	return syscall.ForkExec(argv0, argv, attr)
}
