package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/expiry"
	"github.com/gatehouse-dev/gatehouse/sandbox"
	"github.com/hashicorp/hcl/v2"
	"golang.org/x/sys/unix"
)

// Host checks: a configuration on which no worker can start is an error,
// not a crash loop. Load (and Parse without SkipFSChecks) checks what the
// host must hold for a worker to start: the workers' account exists and is
// unprivileged, it can read every static root, the embedded handlers named
// exist in the worker program, a configured chroot is an empty directory and
// the admin socket's directory exists; and what the supervisor must read:
// every TLS certificate and key loads as it will be served (LoadKeyPair).
//
// A static root is opened by the supervisor, while it still can, and handed
// to the workers as a descriptor: their account needs to list and search
// the root itself, not the directories above it.

// hostChecks is the decoder's state for the host checks.
type hostChecks struct {
	// account is the workers' host account; nil when it could not be
	// resolved (that is reported at the user key).
	account  *sandbox.Account
	handlers []string // embedded handler names the worker program has
	// keysAsUser and keysAs: see ParseOptions.KeysAsUser; keysAs is the
	// supervisor's account, nil to read as the caller.
	keysAsUser bool
	keysAs     *sandbox.Account
	// certificates: the certificate and key files are read
	// (ParseOptions.SkipCertificates unset).
	certificates bool
	// openRoot opens a static root (ParseOptions.OpenRoot); nil opens the
	// path.
	openRoot func(path string) (*os.File, error)
	// authorizesUploads: see ParseOptions.AuthorizesUploads.
	authorizesUploads bool
}

// checkUser resolves the supervisor's account from cfg.User and the
// workers' from cfg.WorkerUser (rng: where user or worker_user is set, or
// the file's start for the defaults).
func (d *decoder) checkUser(user, workerUser string, rng hcl.Range) {
	for _, u := range []string{user, workerUser} {
		if u == "" {
			continue
		}
		if _, _, err := sandbox.LookupUser(u); err != nil {
			d.errorf(rng, "Unknown user", "user %q: %s.", u, strings.TrimPrefix(err.Error(), "sandbox: "))
			return
		}
	}
	if d.host.keysAsUser && os.Geteuid() == 0 {
		// A privileged `user` is reported below.
		if sup, _, err := sandbox.SupervisorAccount(user); err == nil {
			d.host.keysAs = &sup
		}
	}
	acct, err := sandbox.WorkerAccount(workerUser, user)
	if err != nil {
		d.errorf(rng, "Invalid user", "user %q, worker_user %q: %s.", user, workerUser, strings.TrimPrefix(err.Error(), "sandbox: "))
		return
	}
	d.host.account = &acct
}

// checkRoot reports a static root the supervisor cannot open or the
// workers cannot read.
func (d *decoder) checkRoot(route, root string, rng hcl.Range) bool {
	return d.checkRootDir(route+": static.root", root, rng)
}

// checkRootDir reports a directory handed to the workers (what names it)
// that the supervisor cannot open or the workers cannot read.
func (d *decoder) checkRootDir(what, root string, rng hcl.Range) bool {
	open := d.host.openRoot
	if open == nil {
		open = sandbox.OpenRootDir
	}
	f, err := open(root)
	if err == nil && f == nil {
		// No root descriptors on this system: the workers open the path.
		f, err = os.Open(root)
	}
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		if errors.Is(err, fs.ErrPermission) {
			d.errorf(rng, "Unreadable static root", "%s %q cannot be opened by the supervisor's account (uid %d, gid %d), which hands it to the workers: %s.", what, root, os.Geteuid(), os.Getegid(), unsearchable(root, err))
		} else {
			d.errorf(rng, "Invalid static root", "%s %q: %v.", what, root, err)
		}
		return false
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		d.errorf(rng, "Invalid static root", "%s %q: %v.", what, root, err)
		return false
	case !fi.IsDir():
		d.errorf(rng, "Invalid static root", "%s %q is not a directory.", what, root)
		return false
	}
	if d.host.account == nil {
		return true
	}
	if err := canRead(f, fi, *d.host.account); err != nil {
		d.errorf(rng, "Unreadable static root", "%s %q cannot be opened by the workers' account %s: %s.", what, root, d.host.account, err)
		return false
	}
	return true
}

func (d *decoder) checkCertificate(c Certificate, what string, rng hcl.Range) {
	pair, err := LoadKeyPair(c, d.host.keysAs)
	if err != nil {
		errs := []error{err}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			errs = j.Unwrap()
		}
		for _, e := range errs {
			detail := e.Error()
			if d.host.keysAs != nil && errors.Is(e, fs.ErrPermission) {
				detail += "; the supervisor runs as that account once started and reads the files again on every reload"
			}
			d.errorf(rng, "Invalid certificate", "%s: %s.", what, detail)
		}
		return
	}
	if now := time.Now(); now.After(pair.Leaf.NotAfter) {
		d.warnf(rng, "Expired certificate", "%s: the certificate in %s (%s) %s; it is served, and clients will refuse it.",
			what, c.Cert, pair.Leaf.Subject, expiry.Text(pair.Leaf.NotAfter, now))
	}
}

// checkEmbedded reports an embedded handler the worker program lacks.
func (d *decoder) checkEmbedded(route, name string, rng hcl.Range) bool {
	if slices.Contains(d.host.handlers, name) {
		return true
	}
	have := "has no embedded handlers"
	if len(d.host.handlers) > 0 {
		have = "has only " + strings.Join(d.host.handlers, ", ")
	}
	d.errorf(rng, "Unknown embedded handler", "%s: embedded.name %q names no handler of this program, which %s.", route, name, have)
	return false
}

// checkChroot reports a chroot that is not an existing empty directory.
func (d *decoder) checkChroot(dir string, rng hcl.Range) {
	if err := checkDir(dir); err != nil {
		d.errorf(rng, "Invalid chroot", "sandbox.chroot %s; it must be an existing empty directory.", err)
		return
	}
	f, err := os.Open(dir)
	if err == nil {
		_, err = f.Readdirnames(1)
		f.Close()
		if err == nil {
			d.errorf(rng, "Invalid chroot", "sandbox.chroot %q is not empty; it must be an existing empty directory.", dir)
			return
		}
		if err == io.EOF {
			err = nil
		}
	}
	if err != nil {
		d.errorf(rng, "Invalid chroot", "sandbox.chroot %q: %v.", dir, err)
	}
}

// checkSocketDir reports an admin socket whose directory does not exist:
// gatehouse creates no directories.
func (d *decoder) checkSocketDir(path string, rng hcl.Range) {
	if err := checkDir(filepath.Dir(path)); err != nil {
		d.errorf(rng, "Invalid admin socket", "admin.socket %q: its directory %s; gatehouse does not create it.", path, err)
	}
}

// canRead reports whether acct can list and search the directory f (fi its
// status), or an error naming it with its mode and owner. Only the root
// itself counts: the workers are handed it open. For the supervisor's own
// account the kernel decides (faccessat2); for another, the permission bits
// do, as for a process of that uid and gid without supplementary groups (a
// worker's).
func canRead(f *os.File, fi os.FileInfo, acct sandbox.Account) error {
	if allowed(f, fi, acct, unix.R_OK|unix.X_OK) {
		return nil
	}
	return errors.New(modeError(f.Name(), "list and search"))
}

// unsearchable names the directory above path that the process may not
// search, with its mode and owner; err when none is found.
func unsearchable(path string, err error) string {
	for p := filepath.Dir(filepath.Clean(path)); ; p = filepath.Dir(p) {
		if unix.Access(p, unix.X_OK) != nil {
			return modeError(p, "search")
		}
		if p == filepath.Dir(p) {
			return err.Error()
		}
	}
}

// modeError describes a directory that does not let an account do what.
func modeError(path, what string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Sprintf("directory %q does not let it %s", path, what)
	}
	owner := ""
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		owner = fmt.Sprintf(", owner %d:%d", st.Uid, st.Gid)
	}
	return fmt.Sprintf("directory %q has mode %04o%s, which does not let it %s", path, fi.Mode().Perm(), owner, what)
}

// allowed applies the permission bits of fi for need (R_OK, X_OK bits).
func allowed(f *os.File, fi os.FileInfo, acct sandbox.Account, need uint32) bool {
	if acct.Name == "" {
		return accessFile(f, need) == nil
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return true // no owner to check against: leave it to the worker
	}
	perm := uint32(fi.Mode().Perm())
	var bits uint32
	switch {
	case int(st.Uid) == acct.UID:
		bits = perm >> 6
	case int(st.Gid) == acct.GID:
		bits = perm >> 3
	default:
		bits = perm
	}
	return bits&need == need
}
