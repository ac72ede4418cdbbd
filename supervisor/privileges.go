package supervisor

import (
	"fmt"
	"os"
	"syscall"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/sandbox"
	"github.com/gatehouse-dev/gatehouse/spawner"
	"github.com/gatehouse-dev/gatehouse/supervisor/adminapi"
	"github.com/gatehouse-dev/gatehouse/supervisor/spawn"
)

// dropPrivileges leaves the supervisor with what it needs once its
// listeners are bound (docs/DESIGN.md §1):
//
//   - started as root: it starts a spawner as the workers' account
//     (worker_user), keeping CAP_SYS_ADMIN for it only where the spawner's
//     probe shows that account may not create user namespaces, then drops to
//     its own account (user, else "gatehouse", else nobody, loudly) with no
//     capability at all. Workers never share its uid.
//   - started unprivileged: no_new_privs; the workers share its uid, so
//     their user and pid namespaces are required (newWorkerSpec).
//   - Options.KeepRoot: stays root with no_new_privs and spawns the workers
//     itself as worker_user, with a warning.
func (s *Supervisor) dropPrivileges(cfg *config.Config) error {
	if err := sandbox.CheckBuild(); err != nil {
		return err
	}
	log := s.log
	s.account = sandbox.Account{Name: "root", UID: 0, GID: 0}
	if os.Geteuid() != 0 {
		s.account = sandbox.Account{UID: os.Geteuid(), GID: os.Getegid()}
		s.sharedUID = true
		s.separation = "workers share the supervisor's uid (started unprivileged); user and pid namespaces separate them"
		log.Warn("started unprivileged: workers run as the supervisor's uid, separated by user and pid namespaces only; start as root to give them an account of their own")
		kept, err := sandbox.DropSupervisor(nil)
		log.Info("supervisor privileges", "kept", kept)
		return err
	}
	sup, fallback, err := sandbox.SupervisorAccount(cfg.User)
	if err != nil {
		return err
	}
	worker, err := sandbox.WorkerAccount(cfg.WorkerUser, cfg.User)
	if err != nil {
		return err
	}
	s.workerAccount = worker.Name
	if s.opts.KeepRoot {
		s.account.Name = "root"
		s.separation = fmt.Sprintf("workers run as %s; the supervisor stays root (KeepRoot)", worker)
		log.Warn("supervisor stays root: Options.KeepRoot is set", "workers", worker.String())
		kept, err := sandbox.DropSupervisor(nil)
		log.Info("supervisor privileges", "kept", kept)
		return err
	}
	if fallback {
		log.Warn("no `user` set and no \"gatehouse\" account: the supervisor runs as nobody; create a gatehouse account or set user", "account", sup.String())
	}
	// The access log file it created is given to its account, while it
	// still may, so that it can reopen it after a rotation.
	if err := s.access.Adopt(sup, cfg.Log.AccessLogPath); err != nil {
		return err
	}
	if s.spawner, err = s.startSpawner(worker); err != nil {
		return err
	}
	kept, err := sandbox.DropSupervisor(&sup)
	if err != nil {
		s.spawner.Close()
		return err
	}
	s.account = sup
	s.separation = fmt.Sprintf("workers run as %s, the supervisor as %s", worker, sup)
	log.Info("supervisor privileges", "kept", kept, "workers", worker.String())
	return nil
}

// startSpawner starts the spawner as the workers' account. Where that
// account may not create user namespaces, it starts it again keeping
// CAP_SYS_ADMIN, the one capability that lets it.
func (s *Supervisor) startSpawner(worker sandbox.Account) (*spawner.Client, error) {
	args := s.spawnerArgs()
	opts := spawner.Options{
		Path:       s.opts.WorkerPath,
		Args:       args,
		Credential: &syscall.Credential{Uid: uint32(worker.UID), Gid: uint32(worker.GID), Groups: []uint32{}},
		Stderr:     os.Stderr,
	}
	sp, refused, err := spawner.Start(opts)
	if err != nil {
		return nil, err
	}
	if refused == "" {
		s.log.Info("spawner started", "pid", sp.PID(), "account", worker.String(), "capabilities", "none")
		return sp, nil
	}
	sp.Close()
	opts.AmbientCaps = spawn.SysAdminCap
	if sp, _, err = spawner.Start(opts); err != nil {
		return nil, err
	}
	s.log.Warn("spawner keeps cap_sys_admin: the kernel refuses user namespaces to its account", "pid", sp.PID(), "account", worker.String(), "probe", refused)
	return sp, nil
}

// spawnerArgs run WorkerPath as the spawner (Options.SpawnerArgs).
func (s *Supervisor) spawnerArgs() []string {
	if s.opts.SpawnerArgs == nil {
		return []string{spawner.Arg}
	}
	return s.opts.SpawnerArgs
}

// privileges reports what the supervisor holds now, for the status.
func (s *Supervisor) privileges() adminapi.Privileges {
	p := adminapi.Privileges{Separation: s.separation}
	if cur, err := sandbox.CurrentPrivileges(); err == nil {
		p.EUID, p.EGID, p.CapEff, p.CapBnd, p.NoNewPrivs = cur.EUID, cur.EGID, cur.CapEff, cur.CapBnd, cur.NoNewPrivs
		p.Capabilities = sandbox.CapNames(cur.CapEff)
	}
	if s.spawner != nil {
		p.SpawnerPID = s.spawner.PID()
	}
	return p
}
