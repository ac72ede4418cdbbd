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
// when the supervisor runs as root, workerUser (see workerAccountOf) beside
// the account user makes it drop to (see SupervisorAccount); otherwise the
// supervisor's own. A privileged or unknown account, or one sharing the
// supervisor's uid, is an error, as it is when the supervisor starts.
func WorkerAccount(workerUser, user string) (Account, error) {
	if os.Geteuid() != 0 || workerUser == "" && runtime.GOOS != "linux" {
		return Account{UID: os.Geteuid(), GID: os.Getegid()}, nil
	}
	sup, _, err := SupervisorAccount(user)
	if err != nil {
		return Account{}, err
	}
	return workerAccountOf(workerUser, sup)
}
