// Package spawner starts and kills worker processes for a supervisor that
// keeps no privilege (docs/DESIGN.md §1). A supervisor started as root
// starts one spawner before it drops to its own account: the spawner runs
// as the workers' account, distinct from the supervisor's, so each worker's
// user namespace maps that account (its own uid, which needs no capability)
// and neither process holds CAP_SETUID or CAP_SETGID. Only where the kernel
// refuses unprivileged user namespaces does the spawner keep CAP_SYS_ADMIN.
//
// The spawner reads requests on fd 3, a SOCK_SEQPACKET socket, one JSON
// message per datagram: "spawn" (worker arguments, with the worker's channel,
// its output pipe and its document roots as SCM_RIGHTS) and "kill" (a pid it
// started). It
// answers "started" and, when a worker ends, "exited". It starts only its
// own executable as a worker, kills only its own children, and when the
// supervisor goes away (end of fd 3) it kills every worker and exits.
//
// Scope: the spawner trusts the supervisor no more than a worker's
// arguments need: a compromised supervisor can ask it to start workers
// (sandboxed by the worker code itself) and to kill them, nothing else.
package spawner

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/gatehouse-dev/gatehouse/sandbox"
	"golang.org/x/sys/unix"
)

// Arg is the hidden subcommand that runs Main: `gatehouse spawner`.
const Arg = "spawner"

// treeArg, last on a spawner's command line, makes Main the helper that
// exports a document root's mount tree (sandbox.RootTrees).
const treeArg = "-export-tree"

// TreeHelperArgs are the arguments that run the program started with
// spawnerArgs (Arg by default) as that helper.
func TreeHelperArgs(spawnerArgs []string) []string {
	return append(append([]string(nil), spawnerArgs...), treeArg)
}

// channelFD is the descriptor the spawner's socket is passed as.
const channelFD = 3

// maxMessage bounds one message; worker arguments are short.
const maxMessage = 64 << 10

// message is every request and reply.
type message struct {
	Op     string   `json:"op"` // spawn, kill; hello, started, exited
	ID     uint64   `json:"id,omitempty"`
	Args   []string `json:"args,omitempty"`
	PID    int      `json:"pid,omitempty"`
	Error  string   `json:"error,omitempty"`
	Signal int      `json:"signal,omitempty"`
	Code   int      `json:"code,omitempty"`
	// UserNS is the namespace probe's verdict in hello: "" when the
	// spawner may create user namespaces, else why not.
	UserNS string `json:"userns,omitempty"`
	// Cloneflags and Missing answer check: the namespaces a worker with
	// Args would get, and those the kernel refused.
	Cloneflags uint64  `json:"cloneflags,omitempty"`
	Missing    []layer `json:"missing,omitempty"`
}

// layer is a sandbox layer that could not be arranged.
type layer struct {
	Name   string `json:"name"`
	Detail string `json:"detail"`
}

// errClosed is returned once the peer closed the socket.
var errClosed = errors.New("spawner: closed")

func send(fd int, m message, fds ...int) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if err := unix.Sendmsg(fd, b, oob, nil, 0); err != nil {
		return os.NewSyscallError("sendmsg", err)
	}
	return nil
}

// recv reads one message and the descriptors it carries (close-on-exec).
// A truncated message is an error; its descriptors are closed.
func recv(fd int) (message, []int, error) {
	buf := make([]byte, maxMessage)
	oob := make([]byte, unix.CmsgSpace((2+sandbox.MaxRootFDs)*4))
	for {
		n, oobn, flags, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return message{}, nil, os.NewSyscallError("recvmsg", err)
		}
		var fds []int
		if oobn > 0 {
			cms, err := unix.ParseSocketControlMessage(oob[:oobn])
			if err == nil {
				for i := range cms {
					if r, err := unix.ParseUnixRights(&cms[i]); err == nil {
						fds = append(fds, r...)
					}
				}
			}
		}
		if n == 0 && oobn == 0 {
			return message{}, nil, errClosed
		}
		var m message
		if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || json.Unmarshal(buf[:n], &m) != nil {
			closeFDs(fds)
			return message{}, nil, fmt.Errorf("spawner: malformed message (%d bytes, flags %#x)", n, flags)
		}
		return m, fds, nil
	}
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// exitFields describes a wait status as an exited message's fields.
func exitFields(ws syscall.WaitStatus) (signal, code int) {
	switch {
	case ws.Signaled():
		return int(ws.Signal()), 0
	case ws.Exited():
		return 0, ws.ExitStatus()
	}
	return 0, -1
}
