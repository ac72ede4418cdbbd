//go:build !linux

package sandbox

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
	"syscall"
)

// DropSupervisor switches the supervisor to user after it bound its
// listeners, when running as root.
func DropSupervisor(name string) (string, error) {
	if name == "" || os.Geteuid() != 0 {
		return "", nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return "", err
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil || uid == 0 {
		return "", fmt.Errorf("sandbox: user %q is not an unprivileged account", name)
	}
	if err := syscall.Setgroups(nil); err != nil {
		return "", err
	}
	if err := syscall.Setgid(gid); err != nil {
		return "", err
	}
	return fmt.Sprintf("uid %d gid %d", uid, gid), syscall.Setuid(uid)
}
