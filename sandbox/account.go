package sandbox

import (
	"fmt"
	"os"
	"runtime"
)

// Account is the host account whose file permissions a worker has.
type Account struct {
	// Name is the configured user, "nobody" for the default, or "" when
	// the workers keep the supervisor's own account.
	Name     string
	UID, GID int
}

// String names the account for messages: `nobody (uid 65534, gid 65534)`.
func (a Account) String() string {
	name := a.Name
	if name == "" {
		name = "the supervisor's own account"
	}
	return fmt.Sprintf("%s (uid %d, gid %d)", name, a.UID, a.GID)
}

// LookupUser resolves a `user` value the way the supervisor and its workers
// do: "" is nobody, "uid" or "uid:gid" are numeric, anything else is an
// account in /etc/passwd (its primary group).
func LookupUser(name string) (uid, gid int, err error) { return lookupUser(name) }

// WorkerAccount returns the host account workers started now will have:
// when the supervisor runs as root, user (nobody when "" on Linux, where
// workers never keep root); otherwise the supervisor's own. A privileged or
// unknown user is an error, as it is when a worker is spawned.
func WorkerAccount(user string) (Account, error) {
	if os.Geteuid() != 0 || user == "" && runtime.GOOS != "linux" {
		return Account{UID: os.Geteuid(), GID: os.Getegid()}, nil
	}
	uid, gid, err := lookupUser(user)
	if err != nil {
		return Account{}, err
	}
	if uid == 0 || gid == 0 {
		return Account{}, fmt.Errorf("sandbox: user %q is privileged (uid %d gid %d); workers must run as an unprivileged account", user, uid, gid)
	}
	if user == "" {
		user = "nobody"
	}
	return Account{Name: user, UID: uid, GID: gid}, nil
}
