//go:build !linux

package sandbox

import (
	"io/fs"
	"os"
	"syscall"
)

// ReadFileAs reads the file at path for acct: without per-thread
// credentials on this system, the caller reads it and the file's permission
// bits decide whether acct, with its uid and gid and no supplementary
// groups, could (the directories on the way and ACLs are not checked). nil,
// or a caller that is not root, reads as the caller.
func ReadFileAs(acct *Account, path string) ([]byte, error) {
	if acct == nil || os.Geteuid() != 0 {
		return os.ReadFile(path)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		perm := uint32(fi.Mode().Perm())
		switch {
		case int(st.Uid) == acct.UID:
			perm >>= 6
		case int(st.Gid) == acct.GID:
			perm >>= 3
		}
		if perm&4 == 0 {
			return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrPermission}
		}
	}
	return os.ReadFile(path)
}
