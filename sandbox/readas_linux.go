package sandbox

import (
	"os"
	"runtime"

	"github.com/gatehouse-dev/gatehouse/sandbox/internal/sys"
	"golang.org/x/sys/unix"
)

// ReadFileAs reads the file at path as a process running as acct would:
// open(2) decides, with acct's uid and gid and no supplementary groups (the
// supervisor's credentials once it dropped to its account), so ACLs and
// every directory on the way count. Called as root, it reads on a thread of
// its own given acct's credentials, which ends with the read: the process's
// other threads keep theirs. nil, or a caller that is not root, reads as the
// caller.
func ReadFileAs(acct *Account, path string) ([]byte, error) {
	if acct == nil || os.Geteuid() != 0 {
		return os.ReadFile(path)
	}
	done := make(chan readResult, 1)
	go readAs(acct, path, done)
	r := <-done
	return r.data, r.err
}

type readResult struct {
	data []byte
	err  error
}

// readAs reads path as acct on its goroutine's thread, which it locks and
// never unlocks: the runtime ends such a thread with its goroutine, so its
// credentials serve nothing else, and meanwhile starts threads from a clean
// template thread (runtime.LockOSThread). The main thread is the exception:
// the runtime parks it for ever instead, and its ids are the process's for
// /proc and kill(2). On it, readAs holds the thread while another
// goroutine, which then cannot run there, reads.
func readAs(acct *Account, path string, done chan<- readResult) {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		inner := make(chan readResult, 1)
		go readAs(acct, path, inner)
		done <- <-inner
		runtime.UnlockOSThread()
		return
	}
	if err := sys.ThreadCredentials(acct.UID, acct.GID); err != nil {
		done <- readResult{err: err}
		return
	}
	data, err := os.ReadFile(path)
	done <- readResult{data, err}
}
