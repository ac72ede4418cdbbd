package sandbox

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Default accounts, looked up when the configuration names none.
const (
	// DefaultSupervisorUser is the account a supervisor started as root
	// runs as when `user` is unset and the account exists.
	DefaultSupervisorUser = "gatehouse"
	// DefaultWorkerUser is the workers' account when `worker_user` is unset
	// and the account exists.
	DefaultWorkerUser = "gatehouse-worker"
	// fallbackWorkerID is the workers' uid and gid when neither the
	// account nor a subordinate range exists: unassigned on common
	// distributions, distinct from nobody (65534).
	fallbackWorkerID = 65533
)

// LookupAccount resolves a name from /etc/passwd, "UID" or "UID:GID".
func LookupAccount(name string) (Account, error) {
	uid, gid, err := lookupUser(name)
	return Account{Name: name, UID: uid, GID: gid}, err
}

// SupervisorAccount is the account a root-started supervisor drops to: name
// if set, else DefaultSupervisorUser where it exists, else nobody with
// fallback true (the caller says so loudly).
func SupervisorAccount(name string) (a Account, fallback bool, err error) {
	if name != "" {
		if a, err = LookupAccount(name); err == nil && (a.UID == 0 || a.GID == 0) {
			err = fmt.Errorf("sandbox: user %q is privileged (uid %d gid %d); the supervisor drops to an unprivileged account", name, a.UID, a.GID)
		}
		return a, false, err
	}
	if a, err := LookupAccount(DefaultSupervisorUser); err == nil {
		return a, false, nil
	}
	a, err = LookupAccount("nobody")
	if err != nil {
		a, err = Account{Name: "nobody", UID: nobodyID, GID: nobodyID}, nil
	}
	return a, true, err
}

// workerAccountOf is the workers' account beside a supervisor running as
// sup: name if set, else DefaultWorkerUser where it exists, else the first
// id of sup's subordinate uid and gid ranges, else fallbackWorkerID. It is
// an error for it to be root or to share sup's uid.
func workerAccountOf(name string, sup Account) (Account, error) {
	var a Account
	var err error
	switch {
	case name != "":
		a, err = LookupAccount(name)
	default:
		if a, err = LookupAccount(DefaultWorkerUser); err == nil {
			break
		}
		u, okU := firstSubordinate("/etc/subuid", sup)
		g, okG := firstSubordinate("/etc/subgid", sup)
		if okU && okG {
			a, err = Account{Name: fmt.Sprintf("%d:%d", u, g), UID: u, GID: g}, nil
		} else {
			a, err = Account{Name: fmt.Sprintf("%d:%d", fallbackWorkerID, fallbackWorkerID), UID: fallbackWorkerID, GID: fallbackWorkerID}, nil
		}
	}
	switch {
	case err != nil:
		return Account{}, err
	case a.UID == 0 || a.GID == 0:
		return Account{}, fmt.Errorf("sandbox: worker account %s is privileged", a)
	case a.UID == sup.UID:
		return Account{}, fmt.Errorf("sandbox: worker account %s shares the supervisor's uid; a worker could signal or trace it", a)
	}
	return a, nil
}

// firstSubordinate returns the first id of sup's range in a subid file
// ("name:start:count" or "uid:start:count").
func firstSubordinate(path string, sup Account) (int, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(fields) != 3 || (fields[0] != sup.Name && fields[0] != strconv.Itoa(sup.UID)) {
			continue
		}
		start, err1 := strconv.Atoi(fields[1])
		count, err2 := strconv.Atoi(fields[2])
		if err1 == nil && err2 == nil && start > 0 && count > 0 {
			return start, true
		}
	}
	return 0, false
}
