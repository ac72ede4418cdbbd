package sandbox

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// TestStartLeaksNoIDMap: children started at once in user namespaces of
// their own never hold a descriptor of another child's uid_map or gid_map,
// which its parent writes while the runtime forks others beside it.
func TestStartLeaksNoIDMap(t *testing.T) {
	if err := probeNamespaces(os.Geteuid() == 0)[syscall.CLONE_NEWUSER]; err != nil {
		t.Skipf("no user namespaces here: %v", err)
	}
	ls, err := exec.LookPath("ls")
	if err != nil {
		t.Skip("no ls")
	}
	uid, gid := os.Geteuid(), os.Getegid()
	if uid == 0 {
		uid, gid = nobodyID, nobodyID
	}
	const rounds, children = 8, 24
	for r := range rounds {
		var wg sync.WaitGroup
		outs := make([]bytes.Buffer, children)
		for i := range children {
			wg.Add(1)
			go func() {
				defer wg.Done()
				attr := &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER, Pdeathsig: syscall.SIGKILL}
				attr.UidMappings, attr.GidMappings, attr.GidMappingsEnableSetgroups = idMaps(os.Geteuid() == 0, uid, gid)
				cmd := &exec.Cmd{Path: ls, Args: []string{ls, "-l", "/proc/self/fd/"}, Stdout: &outs[i], SysProcAttr: attr}
				if err := Start(cmd); err != nil {
					t.Errorf("round %d, child %d: %v", r, i, err)
					return
				}
				cmd.Wait()
			}()
		}
		wg.Wait()
		for i := range outs {
			if s := outs[i].String(); strings.Contains(s, "uid_map") || strings.Contains(s, "gid_map") {
				t.Fatalf("round %d, child %d holds another child's id map:\n%s", r, i, s)
			}
		}
	}
}
