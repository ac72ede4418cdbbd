// Package privileges leaves the supervisor with what it needs once its
// listeners are bound (docs/DESIGN.md §1), and reports what it holds.
package privileges

import (
	"fmt"
	"os"
	"syscall"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/sandbox"
	"github.com/gatehouse-dev/gatehouse/spawner"
	"github.com/gatehouse-dev/gatehouse/supervisor/adminapi"
	"github.com/gatehouse-dev/gatehouse/supervisor/spawn"
	"github.com/hashicorp/go-hclog"
)

// Options are what Drop needs of the supervisor.
type Options struct {
	Log hclog.Logger
	// KeepRoot is the supervisor's Options.KeepRoot.
	KeepRoot bool
	// WorkerPath and SpawnerArgs run the spawner.
	WorkerPath  string
	SpawnerArgs []string
	// Adopt gives the access log file to the supervisor's account, while
	// it still may, so that it can reopen it after a rotation.
	Adopt func(sandbox.Account) error
}

// Dropped is what the supervisor is left as.
type Dropped struct {
	// Account is the supervisor's own account (which reads the certificate
	// files on every reload); WorkerAccount the workers', "" when they
	// share its uid.
	Account       sandbox.Account
	WorkerAccount string
	// SharedUID: the workers share the supervisor's uid (started
	// unprivileged).
	SharedUID bool
	// Separation is what the workers' separation rests on, for the status.
	Separation string
	// Spawner starts the workers, nil where the supervisor does itself.
	Spawner *spawner.Client
}

// Drop leaves the supervisor with what it needs once its listeners are
// bound:
//
//   - started as root: it starts a spawner as the workers' account
//     (worker_user), keeping CAP_SYS_ADMIN for it only where the spawner's
//     probe shows that account may not create user namespaces, then drops to
//     its own account (user, else "gatehouse", else nobody, loudly) with no
//     capability at all. Workers never share its uid.
//   - started unprivileged: no_new_privs; the workers share its uid, so
//     their user and pid namespaces are required.
//   - Options.KeepRoot: stays root with no_new_privs and spawns the workers
//     itself as worker_user, with a warning.
//
// On an error, what it returns is as far as it got, with no spawner.
func Drop(cfg *config.Config, o Options) (Dropped, error) {
	var d Dropped
	if err := sandbox.CheckBuild(); err != nil {
		return d, err
	}
	log := o.Log
	d.Account = sandbox.Account{Name: "root", UID: 0, GID: 0}
	if os.Geteuid() != 0 {
		d.Account = sandbox.Account{UID: os.Geteuid(), GID: os.Getegid()}
		d.SharedUID = true
		d.Separation = "workers share the supervisor's uid (started unprivileged); user and pid namespaces separate them"
		log.Warn("started unprivileged: workers run as the supervisor's uid, separated by user and pid namespaces only; start as root to give them an account of their own")
		kept, err := sandbox.DropSupervisor(nil)
		log.Info("supervisor privileges", "kept", kept)
		return d, err
	}
	sup, fallback, err := sandbox.SupervisorAccount(cfg.User)
	if err != nil {
		return d, err
	}
	worker, err := sandbox.WorkerAccount(cfg.WorkerUser, cfg.User)
	if err != nil {
		return d, err
	}
	d.WorkerAccount = worker.Name
	if o.KeepRoot {
		d.Account.Name = "root"
		d.Separation = fmt.Sprintf("workers run as %s; the supervisor stays root (KeepRoot)", worker)
		log.Warn("supervisor stays root: Options.KeepRoot is set", "workers", worker.String())
		kept, err := sandbox.DropSupervisor(nil)
		log.Info("supervisor privileges", "kept", kept)
		return d, err
	}
	if fallback {
		log.Warn("no `user` set and no \"gatehouse\" account: the supervisor runs as nobody; create a gatehouse account or set user", "account", sup.String())
	}
	if err := o.Adopt(sup); err != nil {
		return d, err
	}
	sp, err := startSpawner(o, worker)
	if err != nil {
		return d, err
	}
	kept, err := sandbox.DropSupervisor(&sup)
	if err != nil {
		sp.Close()
		return d, err
	}
	d.Spawner = sp
	d.Account = sup
	d.Separation = fmt.Sprintf("workers run as %s, the supervisor as %s", worker, sup)
	log.Info("supervisor privileges", "kept", kept, "workers", worker.String())
	return d, nil
}

// startSpawner starts the spawner as the workers' account. Where that
// account may not create user namespaces, it starts it again keeping
// CAP_SYS_ADMIN, the one capability that lets it.
func startSpawner(o Options, worker sandbox.Account) (*spawner.Client, error) {
	opts := spawner.Options{
		Path:       o.WorkerPath,
		Args:       o.SpawnerArgs,
		Credential: &syscall.Credential{Uid: uint32(worker.UID), Gid: uint32(worker.GID), Groups: []uint32{}},
		Stderr:     os.Stderr,
	}
	sp, refused, err := spawner.Start(opts)
	if err != nil {
		return nil, err
	}
	if refused == "" {
		o.Log.Info("spawner started", "pid", sp.PID(), "account", worker.String(), "capabilities", "none")
		return sp, nil
	}
	sp.Close()
	opts.AmbientCaps = spawn.SysAdminCap
	if sp, _, err = spawner.Start(opts); err != nil {
		return nil, err
	}
	o.Log.Warn("spawner keeps cap_sys_admin: the kernel refuses user namespaces to its account", "pid", sp.PID(), "account", worker.String(), "probe", refused)
	return sp, nil
}

// Report is what the supervisor holds now, for the status: separation is
// Dropped's, and sp its spawner, or nil.
func Report(separation string, sp *spawner.Client) adminapi.Privileges {
	p := adminapi.Privileges{Separation: separation}
	if cur, err := sandbox.CurrentPrivileges(); err == nil {
		p.EUID, p.EGID, p.CapEff, p.CapBnd, p.NoNewPrivs = cur.EUID, cur.EGID, cur.CapEff, cur.CapBnd, cur.NoNewPrivs
		p.Capabilities = sandbox.CapNames(cur.CapEff)
	}
	if sp != nil {
		p.SpawnerPID = sp.PID()
	}
	return p
}
