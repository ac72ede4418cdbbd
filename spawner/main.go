package spawner

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sync"
	"syscall"

	"github.com/gatehouse-dev/gatehouse/sandbox"
	"golang.org/x/sys/unix"
)

// workerPath is what the spawner executes: itself, which the workers'
// account can exec even where it cannot search the binary's directory.
const workerPath = "/proc/self/exe"

// Main runs the spawner on fd 3 until the supervisor closes it, then kills
// every worker it started. It returns the exit status.
//
// Started by sandbox.RootTrees with TreeHelperArgs, it is that helper
// instead.
func Main() int {
	if len(os.Args) > 1 && os.Args[len(os.Args)-1] == treeArg {
		return sandbox.ExportTreeMain()
	}
	if err := sandbox.SetNoNewPrivs(); err != nil {
		fmt.Fprintln(os.Stderr, "spawner: setting no_new_privs:", err)
		return 1
	}
	srv := &server{fd: channelFD, children: map[int]bool{}}
	if err := send(srv.fd, message{Op: "hello", UserNS: sandbox.UserNamespaceRefused()}); err != nil {
		fmt.Fprintln(os.Stderr, "spawner:", err)
		return 1
	}
	err := srv.serve()
	srv.killAll()
	if err != nil && err != errClosed {
		fmt.Fprintln(os.Stderr, "spawner:", err)
		return 1
	}
	return 0
}

type server struct {
	fd int

	sendMu sync.Mutex // serialises replies from the children's goroutines

	mu       sync.Mutex
	children map[int]bool // +checklocks:mu
}

func (s *server) reply(m message) {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	send(s.fd, m)
}

func (s *server) serve() error {
	for {
		m, fds, err := recv(s.fd)
		if err != nil {
			return err
		}
		switch m.Op {
		case "spawn":
			if len(fds) < 2 {
				closeFDs(fds)
				s.reply(message{Op: "started", ID: m.ID, Error: "spawn needs the channel and the output pipe"})
				continue
			}
			go s.spawn(m, fds[0], fds[1], fds[2:])
		case "check":
			closeFDs(fds)
			r := message{Op: "checked", ID: m.ID}
			attr, missing, err := workerAttr(m.Args)
			if err != nil {
				r.Error = err.Error()
			} else {
				r.Cloneflags = cloneflags(attr)
			}
			for _, l := range missing {
				r.Missing = append(r.Missing, layer{Name: l.Name, Detail: l.Detail})
			}
			s.reply(r)
		case "kill":
			closeFDs(fds)
			s.mu.Lock()
			mine := s.children[m.PID]
			s.mu.Unlock()
			if mine {
				unix.Kill(m.PID, unix.SIGKILL)
			}
		default:
			closeFDs(fds)
			return fmt.Errorf("spawner: unknown request %q", m.Op)
		}
	}
}

// spawn starts one worker and waits for it, on a goroutine locked to its OS
// thread for the worker's life (Pdeathsig fires when the creating thread
// exits, golang/go#27505). rootFDs are the worker's document roots, O_PATH
// directories passed on as its fds 4.. or, when it gets namespaces of its
// own, as mount trees of them.
func (s *server) spawn(m message, ipcFD, outFD int, rootFDs []int) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ipcF, out := os.NewFile(uintptr(ipcFD), "ipc"), os.NewFile(uintptr(outFD), "output")
	roots := make([]*os.File, len(rootFDs))
	for i, fd := range rootFDs {
		roots[i] = os.NewFile(uintptr(fd), "root")
	}
	attr, _, err := workerAttr(m.Args)
	var policy sandbox.Policy
	if err == nil {
		policy, err = workerPolicy(m.Args)
	}
	if err == nil && !slices.Equal(policy.RootFDs, RootFDs(len(roots))) {
		err = fmt.Errorf("spawn: the worker's arguments name root descriptors %v for %d roots passed", policy.RootFDs, len(roots))
	}
	if err == nil && sandbox.NeedsRootTrees(attr) && len(roots) > 0 {
		var trees []*os.File
		trees, err = sandbox.RootTrees(workerPath, TreeHelperArgs(os.Args[1:]), attr, roots)
		closeFiles(roots)
		roots = trees
	}
	cmd := &exec.Cmd{
		Path:        workerPath,
		Args:        append([]string{os.Args[0]}, m.Args...),
		Env:         []string{},
		Stdout:      out,
		Stderr:      out,
		ExtraFiles:  append([]*os.File{ipcF}, roots...),
		SysProcAttr: attr,
		Dir:         "/",
	}
	if err == nil {
		err = sandbox.Start(cmd)
	}
	ipcF.Close()
	out.Close()
	closeFiles(roots)
	if err != nil {
		s.reply(message{Op: "started", ID: m.ID, Error: err.Error()})
		return
	}
	pid := cmd.Process.Pid
	s.mu.Lock()
	s.children[pid] = true
	s.mu.Unlock()
	s.reply(message{Op: "started", ID: m.ID, PID: pid})
	cmd.Wait()
	s.mu.Lock()
	delete(s.children, pid)
	s.mu.Unlock()
	r := message{Op: "exited", ID: m.ID, PID: pid}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
		r.Signal, r.Code = exitFields(ws)
	}
	s.reply(r)
}

func (s *server) killAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for pid := range s.children {
		unix.Kill(pid, unix.SIGKILL)
	}
}

// workerAttr is the process attributes of a worker with args: the sandbox
// policy among them decides its namespaces (sandbox.SpawnAttr).
func workerAttr(args []string) (*syscall.SysProcAttr, []sandbox.Layer, error) {
	policy, err := workerPolicy(args)
	if err != nil {
		return nil, nil, err
	}
	return sandbox.SpawnAttr(policy)
}

// workerPolicy is the sandbox policy among a worker's args.
func workerPolicy(args []string) (sandbox.Policy, error) {
	var policyArgs []string
	for _, a := range args {
		if sandbox.IsArg(a) {
			policyArgs = append(policyArgs, a)
		}
	}
	return sandbox.ParseArgs(policyArgs)
}

// RootFDs are the descriptors a worker finds its n document roots at, as a
// spawner or a supervisor starts it: 4.., after its channel (3).
func RootFDs(n int) []int {
	fds := make([]int, n)
	for i := range fds {
		fds[i] = 4 + i
	}
	return fds
}

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}
