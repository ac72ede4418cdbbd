package config

import (
	"os"

	"golang.org/x/sys/unix"
)

// accessFile is faccessat2 on the open file f with the effective ids: its
// path may lead through directories the process cannot search.
func accessFile(f *os.File, need uint32) error {
	return unix.Faccessat(int(f.Fd()), "", need, unix.AT_EACCESS|unix.AT_EMPTY_PATH)
}
