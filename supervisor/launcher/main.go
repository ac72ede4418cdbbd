package launcher

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Main runs the launcher on fd 3 until the supervisor is gone; its
// arguments after Arg are the recorded binary path and configuration path.
// It returns the exit status.
func Main() int {
	if len(os.Args) != 4 || os.Args[1] != Arg || !filepath.IsAbs(os.Args[2]) {
		fmt.Fprintln(os.Stderr, "upgrade launcher: started without its recorded paths")
		return 1
	}
	// Signals meant for the service (a terminal's ^C, an init system's
	// SIGTERM to the group) are the supervisor's to act on; this process
	// ends with it. Caught rather than ignored: the binary it starts gets
	// them back at their defaults.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE)
	go func() {
		for range sigs {
		}
	}()
	s := &server{fd: channelFD, exe: os.Args[2], config: os.Args[3], env: os.Environ()}
	s.serve()
	return 0
}

// server is the launcher: it starts at most one process at a time.
type server struct {
	fd          int
	exe, config string
	env         []string

	sendMu sync.Mutex
	mu     sync.Mutex
	child  *os.Process // +checklocks:mu; the process launched, until reaped
}

func (s *server) reply(r response) {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	unix.Write(s.fd, r.encode())
}

func (s *server) serve() {
	buf := make([]byte, requestSize+1)
	oob := make([]byte, unix.CmsgSpace(4*8))
	for {
		n, oobn, flags, _, err := unix.Recvmsg(s.fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil || (n == 0 && oobn == 0) {
			return // the supervisor is gone
		}
		fds := parseRights(oob[:oobn])
		r, err := decodeRequest(buf[:n])
		if err == nil && flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
			err = errors.New("truncated request")
		}
		switch {
		case err != nil:
			s.reply(response{kind: kindRefused, reason: err.Error()})
		case r.op == opLaunch && len(fds) == 1:
			resp, cmd := s.launch(fds[0])
			s.reply(resp)
			if cmd != nil {
				// Its exit is reported after its start.
				go s.reap(cmd)
			}
		case r.op == opKill:
			s.mu.Lock()
			if s.child != nil {
				s.child.Kill()
			}
			s.mu.Unlock()
		default:
			s.reply(response{kind: kindRefused, reason: "unknown request or not one descriptor"})
		}
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
}

func parseRights(oob []byte) []int {
	var fds []int
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	for _, m := range msgs {
		if r, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, r...)
		}
	}
	return fds
}

// launch starts the recorded binary with the hand-over socket as fd 3; the
// command is nil when it refused.
func (s *server) launch(handover int) (response, *exec.Cmd) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.child != nil {
		return response{kind: kindRefused, reason: fmt.Sprintf("a launch is in flight (pid %d)", s.child.Pid)}, nil
	}
	f, err := openChecked(s.exe)
	if err != nil {
		return response{kind: kindRefused, reason: err.Error()}, nil
	}
	defer f.Close()
	args := []string{s.exe, "-upgrade-fd", "3"}
	if s.config != "" {
		args = append(args, "-config", s.config)
	}
	hf := os.NewFile(uintptr(handover), "handover")
	// Executed through the descriptor checked, not the path, which may
	// name another file by now. No Pdeathsig: the new gatehouse outlives
	// this process and the old supervisor.
	cmd := &exec.Cmd{
		Path:       "/proc/self/fd/" + strconv.Itoa(int(f.Fd())),
		Args:       args,
		Env:        s.env,
		Stdout:     os.Stdout,
		Stderr:     os.Stderr,
		ExtraFiles: []*os.File{hf},
	}
	err = cmd.Start()
	if err != nil {
		return response{kind: kindRefused, reason: fmt.Sprintf("starting %s: %v", s.exe, err)}, nil
	}
	s.child = cmd.Process
	return response{kind: kindStarted, pid: int32(cmd.Process.Pid)}, cmd
}

// reap waits for the process launched and tells the supervisor how it
// ended; another launch may follow.
func (s *server) reap(cmd *exec.Cmd) {
	cmd.Wait()
	st := cmd.ProcessState.Sys().(syscall.WaitStatus)
	status := int32(st.ExitStatus())
	if st.Signaled() {
		status = -int32(st.Signal())
	}
	s.mu.Lock()
	s.child = nil
	s.mu.Unlock()
	s.reply(response{kind: kindExited, status: status})
}

// openChecked opens the binary at path for executing it, and refuses it
// unless only root could have put it there: the file is a regular
// executable owned by root and writable by no one else, and so is every
// directory above it, as named and as resolved (a world-writable directory
// is accepted only with the sticky bit, where no one else can replace
// root's entries).
func openChecked(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, err
	}
	if err := checkFile(path, &st); err != nil {
		f.Close()
		return nil, err
	}
	real, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
	if err != nil {
		f.Close()
		return nil, err
	}
	for _, p := range []string{path, real} {
		if err := checkDirs(p); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

func checkFile(path string, st *unix.Stat_t) error {
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return fmt.Errorf("refusing %s: not a regular file", path)
	case st.Uid != 0:
		return fmt.Errorf("refusing %s: owned by uid %d, not root", path, st.Uid)
	case st.Mode&0o022 != 0:
		return fmt.Errorf("refusing %s: writable by group or others (mode %#o)", path, st.Mode&0o7777)
	case st.Mode&0o111 == 0:
		return fmt.Errorf("refusing %s: not executable", path)
	}
	return nil
}

// checkDirs checks every directory above path.
func checkDirs(path string) error {
	for d := filepath.Dir(filepath.Clean(path)); ; d = filepath.Dir(d) {
		var st unix.Stat_t
		if err := unix.Lstat(d, &st); err != nil {
			return err
		}
		link := st.Mode&unix.S_IFMT == unix.S_IFLNK
		switch {
		case st.Uid != 0:
			return fmt.Errorf("refusing the binary: directory %s is owned by uid %d, not root", d, st.Uid)
		case !link && st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0:
			return fmt.Errorf("refusing the binary: directory %s is writable by group or others (mode %#o)", d, st.Mode&0o7777)
		}
		if d == "/" || d == "." {
			return nil
		}
	}
}
