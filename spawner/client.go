package spawner

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/gatehouse-dev/gatehouse/sandbox"
	"golang.org/x/sys/unix"
)

// Client is the supervisor's end of a running spawner.
type Client struct {
	fd  int // the socket; owned by the reader goroutine once Start returns
	pid int

	sendMu sync.Mutex

	mu      sync.Mutex
	nextID  uint64                  // +checklocks:mu
	waiting map[uint64]chan message // +checklocks:mu
	exits   map[uint64]chan message // +checklocks:mu
	err     error                   // +checklocks:mu; set once the spawner is gone
	done    chan struct{}           // closed when the spawner is gone
}

// Options describe the spawner's process.
type Options struct {
	// Path and Args run the spawner (Args without the program name), e.g.
	// /proc/self/exe and ["spawner"].
	Path string
	Args []string
	// Credential is the account the spawner runs as: the workers'.
	Credential *syscall.Credential
	// AmbientCaps are kept across the switch to Credential (CAP_SYS_ADMIN
	// where user namespaces need it), nil for none.
	AmbientCaps []uintptr
	// Stderr receives the spawner's own diagnostics.
	Stderr *os.File
}

// ErrGone is returned once the spawner has exited.
var ErrGone = errors.New("spawner: gone")

// Start runs a spawner and waits for its hello. It returns the client and
// the spawner's verdict on unprivileged user namespaces ("" if allowed).
func Start(opts Options) (*Client, string, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, "", os.NewSyscallError("socketpair", err)
	}
	theirs := os.NewFile(uintptr(pair[1]), "spawner")
	started := make(chan error, 1)
	c := &Client{fd: pair[0], waiting: map[uint64]chan message{}, exits: map[uint64]chan message{}, done: make(chan struct{})}
	// The spawner is started from a thread locked for its lifetime: its
	// Pdeathsig fires when that thread exits (golang/go#27505).
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		cmd := &exec.Cmd{
			Path:        opts.Path,
			Args:        append([]string{opts.Path}, opts.Args...),
			Env:         []string{},
			Stderr:      opts.Stderr,
			ExtraFiles:  []*os.File{theirs},
			Dir:         "/",
			SysProcAttr: procAttr(opts),
		}
		err := sandbox.Start(cmd)
		theirs.Close()
		if err == nil {
			c.pid = cmd.Process.Pid
		}
		started <- err
		if err != nil {
			return
		}
		cmd.Wait()
		// The socket's other end closed with the process: the reader
		// sees it and fails every pending call.
	}()
	if err := <-started; err != nil {
		unix.Close(pair[0])
		return nil, "", fmt.Errorf("starting spawner: %w", err)
	}
	// A spawner that hangs before its first message fails the start
	// instead of holding it with nothing logged.
	if err := waitReadable(c.fd, helloTimeout); err != nil {
		syscall.Kill(c.pid, syscall.SIGKILL)
		unix.Close(c.fd)
		return nil, "", fmt.Errorf("spawner (pid %d) did not say hello: %w", c.pid, err)
	}
	hello, fds, err := recv(c.fd)
	closeFDs(fds)
	if err != nil || hello.Op != "hello" {
		unix.Close(c.fd)
		return nil, "", fmt.Errorf("spawner did not say hello: %v (%q)", err, hello.Op)
	}
	go c.read()
	return c, hello.UserNS, nil
}

// read routes replies to their callers until the spawner is gone.
func (c *Client) read() {
	for {
		m, fds, err := recv(c.fd)
		closeFDs(fds)
		if err != nil {
			c.mu.Lock()
			c.err = fmt.Errorf("%w: %v", ErrGone, err)
			for id, ch := range c.waiting {
				ch <- message{Op: "started", Error: c.err.Error()}
				delete(c.waiting, id)
			}
			for id, ch := range c.exits {
				ch <- message{Op: "exited", Error: c.err.Error()}
				delete(c.exits, id)
			}
			c.mu.Unlock()
			close(c.done)
			return
		}
		c.mu.Lock()
		switch m.Op {
		case "started":
			if ch := c.waiting[m.ID]; ch != nil {
				delete(c.waiting, m.ID)
				ch <- m
			}
		case "checked":
			if ch := c.waiting[m.ID]; ch != nil {
				delete(c.waiting, m.ID)
				ch <- m
			}
		case "exited":
			if ch := c.exits[m.ID]; ch != nil {
				delete(c.exits, m.ID)
				ch <- m
			}
		}
		c.mu.Unlock()
	}
}

// Exit is how a worker started by Spawn ended.
type Exit struct {
	Signal syscall.Signal // 0 unless killed by a signal
	Code   int
	Err    error // the spawner went away before the worker ended
}

// Spawn asks the spawner to start a worker with args (without the program
// name), ipc as its fd 3, out as its stdout and stderr and roots (O_PATH
// directories, at most sandbox.MaxRootFDs) as its fds 4.. (RootFDs), which
// args must name. It does not take ownership of ipc, out or roots. It
// returns the worker's pid and a channel that receives how it ended.
func (c *Client) Spawn(args []string, ipc, out *os.File, roots []*os.File) (int, <-chan Exit, error) {
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return 0, nil, err
	}
	c.nextID++
	id := c.nextID
	started, exited := make(chan message, 1), make(chan message, 1)
	c.waiting[id], c.exits[id] = started, exited
	c.mu.Unlock()

	c.sendMu.Lock()
	fds := []int{int(ipc.Fd()), int(out.Fd())}
	for _, r := range roots {
		fds = append(fds, int(r.Fd()))
	}
	err := send(c.fd, message{Op: "spawn", ID: id, Args: args}, fds...)
	c.sendMu.Unlock()
	if err != nil {
		c.mu.Lock()
		delete(c.waiting, id)
		delete(c.exits, id)
		c.mu.Unlock()
		return 0, nil, err
	}
	m := <-started
	if m.Error != "" {
		c.mu.Lock()
		delete(c.exits, id)
		c.mu.Unlock()
		return 0, nil, errors.New(m.Error)
	}
	res := make(chan Exit, 1)
	go func() {
		e := <-exited
		if e.Error != "" {
			res <- Exit{Err: errors.New(e.Error)}
			return
		}
		res <- Exit{Signal: syscall.Signal(e.Signal), Code: e.Code}
	}()
	return m.PID, res, nil
}

// Kill asks the spawner to SIGKILL a worker it started.
func (c *Client) Kill(pid int) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	return send(c.fd, message{Op: "kill", PID: pid})
}

// PID is the spawner's process id.
func (c *Client) PID() int { return c.pid }

// Close ends the spawner, which kills every worker it started.
func (c *Client) Close() {
	unix.Shutdown(c.fd, unix.SHUT_RDWR)
	<-c.done
	unix.Close(c.fd)
}

// Check asks the spawner which namespaces a worker with args would get
// (clone flags) and which the kernel refuses it; in strict mode a refused
// one is an error, as sandbox.SpawnAttr returns it.
func (c *Client) Check(args []string) (flags uint64, missing []sandbox.Layer, err error) {
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return 0, nil, err
	}
	c.nextID++
	id := c.nextID
	reply := make(chan message, 1)
	c.waiting[id] = reply
	c.mu.Unlock()
	c.sendMu.Lock()
	err = send(c.fd, message{Op: "check", ID: id, Args: args})
	c.sendMu.Unlock()
	if err != nil {
		c.mu.Lock()
		delete(c.waiting, id)
		c.mu.Unlock()
		return 0, nil, err
	}
	m := <-reply
	for _, l := range m.Missing {
		missing = append(missing, sandbox.Layer{Name: l.Name, Detail: l.Detail})
	}
	if m.Error != "" {
		return 0, missing, errors.New(m.Error)
	}
	return m.Cloneflags, missing, nil
}

// helloTimeout bounds the spawner's start: an exec and a few namespace
// probes, well under a second on a loaded machine.
const helloTimeout = 30 * time.Second

// waitReadable waits until fd is readable or closed, at most limit.
func waitReadable(fd int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("no message within %v", limit)
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(left.Milliseconds())+1)
		switch {
		case err == unix.EINTR:
		case err != nil:
			return os.NewSyscallError("poll", err)
		case n > 0:
			return nil
		}
	}
}
