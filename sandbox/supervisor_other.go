//go:build !linux

package sandbox

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
)

// SetNoNewPrivs does nothing: this system has no such flag.
func SetNoNewPrivs() error { return nil }

// DropSupervisor switches the supervisor to the account to after it bound
// its listeners, when running as root.
func DropSupervisor(to *Account) (string, error) {
	if to == nil || os.Geteuid() != 0 {
		return "", nil
	}
	if to.UID == 0 || to.GID == 0 {
		return "", fmt.Errorf("sandbox: supervisor account %s is privileged", to)
	}
	if err := syscall.Setgroups(nil); err != nil {
		return "", err
	}
	if err := syscall.Setgid(to.GID); err != nil {
		return "", err
	}
	return to.String(), syscall.Setuid(to.UID)
}

// UserNamespaceRefused reports that this system has no user namespaces.
func UserNamespaceRefused() string { return "no user namespaces on " + runtime.GOOS }

// Privileges is what the calling process holds.
type Privileges struct {
	EUID, EGID     int
	CapEff, CapBnd string
	NoNewPrivs     bool
}

// CurrentPrivileges returns the calling process's ids; this system has no
// capability sets.
func CurrentPrivileges() (Privileges, error) {
	return Privileges{EUID: os.Geteuid(), EGID: os.Getegid()}, nil
}

// CapNames returns mask as it is.
func CapNames(mask string) string { return mask }
