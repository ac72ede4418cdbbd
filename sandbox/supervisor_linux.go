package sandbox

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/gatehouse-dev/gatehouse/sandbox/internal/sys"
	"golang.org/x/sys/unix"
)

// SetNoNewPrivs sets no_new_privs on every thread of the calling process.
func SetNoNewPrivs() error {
	if cgoBuild {
		return ErrCgo
	}
	return sys.AllThreadsPrctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
}

// DropSupervisor confines the supervisor after it bound its listeners and
// started its spawner: no_new_privs on every thread and, when running as
// root, the account to's uid and gid with no capability at all (effective,
// permitted, inheritable, ambient and bounding sets empty): spawning workers
// is the spawner's job. Not root, it sets no_new_privs only. It returns
// what it did, for the log.
func DropSupervisor(to *Account) (string, error) {
	if cgoBuild {
		return "", ErrCgo
	}
	if to == nil || os.Geteuid() != 0 {
		return "no_new_privs", SetNoNewPrivs()
	}
	if to.UID == 0 || to.GID == 0 {
		return "", fmt.Errorf("sandbox: supervisor account %s is privileged", to)
	}
	// The bounding set first, while CAP_SETPCAP is still effective.
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if err := sys.AllThreadsPrctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return "", err
		}
	}
	if err := syscall.Setgroups(nil); err != nil {
		return "", os.NewSyscallError("setgroups", err)
	}
	if err := syscall.Setresgid(to.GID, to.GID, to.GID); err != nil {
		return "", os.NewSyscallError("setresgid", err)
	}
	// Leaving uid 0 without keepcaps clears the permitted, effective and
	// ambient sets, and makes the process non-dumpable.
	if err := syscall.Setresuid(to.UID, to.UID, to.UID); err != nil {
		return "", os.NewSyscallError("setresuid", err)
	}
	if empty, err := sys.CapsEmpty(); err != nil || !empty {
		return "", fmt.Errorf("sandbox: capabilities remain after dropping to %s (%v)", to, err)
	}
	if err := SetNoNewPrivs(); err != nil {
		return "", err
	}
	return fmt.Sprintf("no_new_privs, %s, no capabilities", to), nil
}

// UserNamespaceRefused probes whether the calling process may create a user
// namespace mapping its own ids: "" if so, else the kernel's refusal.
func UserNamespaceRefused() string {
	if err := probeNamespaces(os.Geteuid() == 0)[syscall.CLONE_NEWUSER]; err != nil {
		return err.Error()
	}
	return ""
}

// Privileges is what the calling process holds, read from /proc/self/status.
type Privileges struct {
	EUID, EGID int
	// CapEff and CapBnd are the effective and bounding capability sets,
	// as the hexadecimal masks /proc shows.
	CapEff, CapBnd string
	NoNewPrivs     bool
}

// CurrentPrivileges reads the calling process's ids and capability sets.
func CurrentPrivileges() (Privileges, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return Privileges{}, err
	}
	p := Privileges{EUID: os.Geteuid(), EGID: os.Getegid()}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimSpace(v)
		switch k {
		case "CapEff":
			p.CapEff = v
		case "CapBnd":
			p.CapBnd = v
		case "NoNewPrivs":
			p.NoNewPrivs = v == "1"
		}
	}
	return p, nil
}

// CapNames names the capabilities in a /proc mask ("" for none).
func CapNames(mask string) string {
	m, err := strconv.ParseUint(mask, 16, 64)
	if err != nil {
		return mask
	}
	var names []string
	for c := 0; c < 64; c++ {
		if m&(1<<c) != 0 {
			if n, ok := capNames[c]; ok {
				names = append(names, n)
			} else {
				names = append(names, "cap_"+strconv.Itoa(c))
			}
		}
	}
	if len(names) == 64 || m == 1<<(unix.CAP_LAST_CAP+1)-1 {
		return "all"
	}
	return strings.Join(names, ",")
}

var capNames = map[int]string{
	unix.CAP_CHOWN: "cap_chown", unix.CAP_DAC_OVERRIDE: "cap_dac_override", unix.CAP_KILL: "cap_kill",
	unix.CAP_SETGID: "cap_setgid", unix.CAP_SETUID: "cap_setuid", unix.CAP_SETPCAP: "cap_setpcap",
	unix.CAP_NET_BIND_SERVICE: "cap_net_bind_service", unix.CAP_NET_ADMIN: "cap_net_admin",
	unix.CAP_SYS_CHROOT: "cap_sys_chroot", unix.CAP_SYS_PTRACE: "cap_sys_ptrace", unix.CAP_SYS_ADMIN: "cap_sys_admin",
}
