// Package spawn starts worker processes for the supervisor's loop, each on
// a goroutine of its own that relays its output and waits for its end: the
// loop calls Run for a slot's new process and learns of its start and exit
// from the Started and Exited it is posted. It also says which sandbox
// layers the process attributes arrange. It knows nothing of the loop.
package spawn

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync/atomic"
	"syscall"

	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/sandbox"
	"github.com/gatehouse-dev/gatehouse/spawner"
	"github.com/gatehouse-dev/gatehouse/supervisor/logrelay"
	"github.com/hashicorp/go-hclog"
)

// Process is a started worker process: an *os.Process, a worker the
// spawner started, or a test's fake.
type Process interface {
	Kill() error
}

// Started is what a spawning goroutine posts to the loop once the process
// of slot's generation gen started, or failed to (Err).
type Started struct {
	Slot int
	Gen  uint64
	// Ch is the supervisor's end of the worker's channel.
	Ch   *ipc.Conn
	Proc Process
	PID  int
	Err  error
}

// spawnedProc is a worker started by the spawner, which alone may signal it.
type spawnedProc struct {
	sp  *spawner.Client
	pid int
}

// Kill asks the spawner to kill the worker.
func (p spawnedProc) Kill() error { return p.sp.Kill(p.pid) }

// Exited is what a spawning goroutine posts to the loop once the process
// of slot's generation gen ended and its output was relayed.
type Exited struct {
	Slot   int
	Gen    uint64
	Status string         // for people: "exited with status 2", "killed by signal 9 (killed)"
	Signal syscall.Signal // 0 when it exited normally
	Code   int
}

// Starter starts worker processes: directly, or through the spawner where
// the supervisor dropped the privileges to do it itself.
type Starter struct {
	// Path is the gatehouse executable a worker runs.
	Path string
	// Spawner starts the workers when not nil.
	Spawner *spawner.Client
	// SpawnerArgs run Path as the spawner, for the helper that gives a
	// worker in its own mount namespace the trees of its roots.
	SpawnerArgs []string
	// Log and Dropped are where each worker's output is relayed and its
	// dropped lines counted (logrelay.WorkerOutput).
	Log     hclog.Logger
	Dropped *atomic.Uint64
	// Post hands Started and Exited to the loop.
	Post func(any)
}

// Command is what one worker process is started with: its arguments after
// the executable's name, its process attributes (a copy of its own) and
// the directories of its static roots, passed as descriptors 4 and on.
type Command struct {
	Args  []string
	Attr  *syscall.SysProcAttr
	Roots []*os.File
}

// Run starts one worker process for slot's generation gen and waits for it,
// posting its start and its exit. It runs on its own goroutine locked to its
// OS thread for the child's whole life, because Pdeathsig fires when the
// creating thread exits (golang/go#27505).
func (st Starter) Run(slot int, gen uint64, c Command) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	ch, theirs, err := ipc.Pair()
	if err != nil {
		st.Post(Started{Slot: slot, Gen: gen, Err: err})
		return
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		ch.Close()
		theirs.Close()
		st.Post(Started{Slot: slot, Gen: gen, Err: err})
		return
	}
	if st.Spawner != nil {
		st.runVia(slot, gen, c, ch, theirs, pr, pw)
		return
	}
	attr := c.Attr
	roots := c.Roots
	var trees []*os.File
	if sandbox.NeedsRootTrees(attr) && len(roots) > 0 {
		// The worker cannot bind a directory opened in this mount
		// namespace: it is given mount trees of its roots.
		trees, err = sandbox.RootTrees(st.Path, spawner.TreeHelperArgs(st.SpawnerArgs), attr, roots)
		if err != nil {
			ch.Close()
			theirs.Close()
			pr.Close()
			pw.Close()
			st.Post(Started{Slot: slot, Gen: gen, Err: fmt.Errorf("starting worker: %w", err)})
			return
		}
		roots = trees
	}
	cmd := &exec.Cmd{
		Path:        st.Path,
		Args:        append([]string{st.Path}, c.Args...),
		Env:         []string{},
		Stdout:      pw,
		Stderr:      pw,
		ExtraFiles:  append([]*os.File{theirs}, roots...), // fds 3, 4..
		SysProcAttr: attr,
	}
	err = sandbox.Start(cmd)
	theirs.Close()
	pw.Close()
	closeFiles(trees)
	if err != nil {
		ch.Close()
		pr.Close()
		st.Post(Started{Slot: slot, Gen: gen, Err: fmt.Errorf("starting worker: %w", err)})
		return
	}
	out := logrelay.NewWorkerOutput(st.Log, slot, cmd.Process.Pid, st.Dropped)
	relayed := make(chan struct{})
	go func() {
		out.Run(pr)
		pr.Close()
		close(relayed)
	}()
	st.Post(Started{Slot: slot, Gen: gen, Ch: ch, Proc: cmd.Process, PID: cmd.Process.Pid})

	err = cmd.Wait()
	<-relayed
	res := Exited{Slot: slot, Gen: gen, Status: "exited"}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
		switch {
		case ws.Signaled():
			res.Signal = ws.Signal()
			res.Status = "killed by " + unixSignalName(ws.Signal())
		case ws.Exited():
			res.Code = ws.ExitStatus()
			res.Status = fmt.Sprintf("exited with status %d", res.Code)
		}
	} else if err != nil {
		res.Status = err.Error()
	}
	st.Post(res)
}

// runVia has the spawner start the worker (the supervisor started as root
// keeps no privilege to do it itself) and waits for its end.
func (st Starter) runVia(slot int, gen uint64, c Command, ch *ipc.Conn, theirs, pr, pw *os.File) {
	pid, exit, err := st.Spawner.Spawn(c.Args, theirs, pw, c.Roots)
	theirs.Close()
	pw.Close()
	if err != nil {
		ch.Close()
		pr.Close()
		st.Post(Started{Slot: slot, Gen: gen, Err: fmt.Errorf("starting worker: %w", err)})
		return
	}
	out := logrelay.NewWorkerOutput(st.Log, slot, pid, st.Dropped)
	relayed := make(chan struct{})
	go func() {
		out.Run(pr)
		pr.Close()
		close(relayed)
	}()
	st.Post(Started{Slot: slot, Gen: gen, Ch: ch, Proc: spawnedProc{sp: st.Spawner, pid: pid}, PID: pid})
	e := <-exit
	<-relayed
	res := Exited{Slot: slot, Gen: gen, Status: "exited"}
	switch {
	case e.Err != nil:
		res.Status = e.Err.Error()
	case e.Signal != 0:
		res.Signal = e.Signal
		res.Status = "killed by " + unixSignalName(e.Signal)
	default:
		res.Code = e.Code
		res.Status = fmt.Sprintf("exited with status %d", res.Code)
	}
	st.Post(res)
}

func unixSignalName(sig syscall.Signal) string {
	name := sig.String()
	return fmt.Sprintf("signal %d (%s)", int(sig), name)
}

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}
