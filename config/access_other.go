//go:build !linux

package config

import (
	"os"

	"golang.org/x/sys/unix"
)

// accessFile is access(2) on f's path with the effective ids: outside Linux
// workers open their roots by path.
func accessFile(f *os.File, need uint32) error {
	return unix.Faccessat(unix.AT_FDCWD, f.Name(), need, unix.AT_EACCESS)
}
