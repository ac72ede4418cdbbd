//go:build !linux

package sandbox

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
)

// OpenRootDir returns nil: outside Linux workers open their roots by path.
func OpenRootDir(string) (*os.File, error) { return nil, nil }

// NeedsRootTrees reports false: this system has no mount namespaces.
func NeedsRootTrees(*syscall.SysProcAttr) bool { return false }

// RootTrees returns nil: this system has no mount namespaces.
func RootTrees(string, []string, *syscall.SysProcAttr, []*os.File) ([]*os.File, error) {
	return nil, nil
}

// ExportTreeMain fails: this system has no mount trees.
func ExportTreeMain() int {
	fmt.Fprintln(os.Stderr, "sandbox: no mount trees on", runtime.GOOS)
	return 1
}
