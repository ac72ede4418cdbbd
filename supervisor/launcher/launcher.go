// Package launcher starts a new gatehouse binary as root for an upgrade of
// a gatehouse started as root (docs/DESIGN.md §11), so that the upgraded
// instance separates its privileges as a fresh start does.
//
// The launcher is a process started before the supervisor drops root; it
// stays root, holds nothing but its socket to the supervisor, and dies with
// it. It answers one request: start the binary at the path gatehouse was
// started from, with the configuration path, arguments and environment
// recorded at start and the hand-over socket the request carries. A
// supervisor that is compromised can ask for nothing else: the request
// names no path, no argument and no variable.
package launcher

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Arg, as the first argument, runs gatehouse as the launcher (Main).
const Arg = "upgrade-launcher"

// channelFD is the launcher's end of its socket.
const channelFD = 3

// The wire: one request is a fixed 8-byte datagram (magic, op), a launch
// with the hand-over socket in SCM_RIGHTS; one response a fixed datagram
// (magic, kind, pid, status, reason).
const (
	magic uint32 = 0x67686c31 // "ghl1"

	opLaunch uint32 = 1 // start the binary with the passed descriptor as fd 3
	opKill   uint32 = 2 // kill the process launched, if it still runs

	kindStarted uint32 = 1 // pid started
	kindRefused uint32 = 2 // reason
	kindExited  uint32 = 3 // the process launched exited: status

	requestSize  = 8
	reasonSize   = 240
	responseSize = 16 + reasonSize
)

type request struct{ op uint32 }

func (r request) encode() []byte {
	b := make([]byte, requestSize)
	binary.LittleEndian.PutUint32(b, magic)
	binary.LittleEndian.PutUint32(b[4:], r.op)
	return b
}

// decodeRequest reads a request; anything but the exact size and magic is
// refused.
func decodeRequest(b []byte) (request, error) {
	if len(b) != requestSize || binary.LittleEndian.Uint32(b) != magic {
		return request{}, fmt.Errorf("malformed request (%d bytes)", len(b))
	}
	return request{op: binary.LittleEndian.Uint32(b[4:])}, nil
}

type response struct {
	kind   uint32
	pid    int32
	status int32 // exit code, or -signal
	reason string
}

func (r response) encode() []byte {
	b := make([]byte, responseSize)
	binary.LittleEndian.PutUint32(b, magic)
	binary.LittleEndian.PutUint32(b[4:], r.kind)
	binary.LittleEndian.PutUint32(b[8:], uint32(r.pid))
	binary.LittleEndian.PutUint32(b[12:], uint32(r.status))
	copy(b[16:], r.reason)
	return b
}

func decodeResponse(b []byte) (response, error) {
	if len(b) != responseSize || binary.LittleEndian.Uint32(b) != magic {
		return response{}, fmt.Errorf("launcher: malformed response (%d bytes)", len(b))
	}
	r := response{kind: binary.LittleEndian.Uint32(b[4:]), pid: int32(binary.LittleEndian.Uint32(b[8:])),
		status: int32(binary.LittleEndian.Uint32(b[12:]))}
	reason := b[16:]
	for i, c := range reason {
		if c == 0 {
			reason = reason[:i]
			break
		}
	}
	r.reason = string(reason)
	return r, nil
}

// exitError is how Wait would have described status.
func exitError(status int32) error {
	switch {
	case status == 0:
		return nil
	case status < 0:
		return fmt.Errorf("signal: %v", syscall.Signal(-status))
	}
	return fmt.Errorf("exit status %d", status)
}

// Options describe the launcher's process and what it will start.
type Options struct {
	// Self runs the launcher: /proc/self/exe.
	Self string
	// Exe is the path gatehouse was started from, the only binary the
	// launcher starts; Config its configuration file ("": the embedded
	// one). Env is the new binary's environment.
	Exe, Config string
	Env         []string
}

// Client is the supervisor's end of a running launcher.
type Client struct {
	fd  int
	pid int

	mu      sync.Mutex // one launch at a time
	replies chan reply
	exited  chan error // +checklocks:exMu; the running launch's, nil when none
	gone    chan struct{}
	exMu    sync.Mutex
}

// ErrGone is returned once the launcher has exited.
var ErrGone = errors.New("launcher: gone")

// Start runs a launcher. It must be called as root, before the supervisor
// drops it; the launcher is killed when this process exits.
func Start(o Options) (*Client, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socketpair", err)
	}
	theirs := os.NewFile(uintptr(pair[1]), "launcher")
	c := &Client{fd: pair[0], replies: make(chan reply, 1), gone: make(chan struct{})}
	started := make(chan error, 1)
	// Started from a thread locked for its lifetime: Pdeathsig fires when
	// that thread exits (golang/go#27505).
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		cmd := &exec.Cmd{
			Path:        o.Self,
			Args:        []string{o.Self, Arg, o.Exe, o.Config},
			Env:         o.Env,
			Stdout:      os.Stdout,
			Stderr:      os.Stderr,
			ExtraFiles:  []*os.File{theirs},
			SysProcAttr: procAttr(),
		}
		err := cmd.Start()
		theirs.Close()
		if err == nil {
			c.pid = cmd.Process.Pid
		}
		started <- err
		if err == nil {
			cmd.Wait()
		}
	}()
	if err := <-started; err != nil {
		unix.Close(pair[0])
		return nil, fmt.Errorf("starting the upgrade launcher: %w", err)
	}
	go c.read()
	return c, nil
}

// PID is the launcher's process id.
func (c *Client) PID() int { return c.pid }

func (c *Client) read() {
	defer func() {
		// A launch waiting for its process's end is told the launcher is
		// gone: what it launched then cannot be killed or awaited here.
		c.exMu.Lock()
		if c.exited != nil {
			c.exited <- ErrGone
			c.exited = nil
		}
		c.exMu.Unlock()
		close(c.gone)
	}()
	buf := make([]byte, responseSize+1)
	for {
		n, err := unix.Read(c.fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return
		}
		r, err := decodeResponse(buf[:n])
		if err != nil {
			continue
		}
		if r.kind == kindExited {
			c.exMu.Lock()
			if c.exited != nil {
				c.exited <- exitError(r.status)
				c.exited = nil
			}
			c.exMu.Unlock()
			continue
		}
		rep := reply{r: r}
		if r.kind == kindStarted {
			// The exit of the process just started is the next one
			// reported: the launcher has one at a time, and sends its
			// exit only after this.
			rep.exited = make(chan error, 1)
			c.exMu.Lock()
			c.exited = rep.exited
			c.exMu.Unlock()
		}
		c.replies <- rep
	}
}

type reply struct {
	r      response
	exited chan error
}

// Launch starts the new binary with handover as its fd 3. It returns its
// pid and a channel that yields how it exited, if it does while the
// launcher lives.
func (c *Client) Launch(handover *os.File) (int, <-chan error, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := unix.Sendmsg(c.fd, request{op: opLaunch}.encode(), unix.UnixRights(int(handover.Fd())), nil, unix.MSG_NOSIGNAL)
	if err != nil {
		return 0, nil, fmt.Errorf("launcher: %w", err)
	}
	select {
	case rep := <-c.replies:
		if rep.r.kind != kindStarted {
			return 0, nil, fmt.Errorf("the upgrade launcher refused: %s", rep.r.reason)
		}
		return int(rep.r.pid), rep.exited, nil
	case <-c.gone:
		return 0, nil, ErrGone
	}
}

// Kill asks the launcher to kill the process it launched, if it still runs.
func (c *Client) Kill() {
	unix.Sendmsg(c.fd, request{op: opKill}.encode(), nil, nil, unix.MSG_NOSIGNAL)
}
