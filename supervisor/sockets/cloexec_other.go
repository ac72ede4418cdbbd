//go:build !linux

package sockets

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// CloseOnExecInherited marks every descriptor above stderr close-on-exec, so
// that nothing gatehouse inherited from its parent reaches a worker.
func CloseOnExecInherited() error {
	ents, err := os.ReadDir("/dev/fd")
	if err != nil {
		return err
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
	return nil
}
