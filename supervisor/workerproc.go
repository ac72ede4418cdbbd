package supervisor

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"

	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/sandbox"
	"github.com/gatehouse-dev/gatehouse/spawner"
	"github.com/gatehouse-dev/gatehouse/supervisor/logrelay"
)

// workerState is a worker slot's lifecycle:
//
//	starting ──Ready──► ready ──Drain/replace──► draining ──exit──► dead
//	    │                 │                                          │
//	    └────exit─────────┴───────────────► dead ──backoff──► starting
type workerState uint8

const (
	workerStarting workerState = iota
	workerReady
	workerDraining
	workerDead
)

var workerStateNames = [...]string{"starting", "ready", "draining", "dead"}

func (s workerState) String() string { return workerStateNames[s] }

// workerProc is one worker slot. Owned by the dispatcher loop.
type workerProc struct {
	slot  int         // unique per slot, kept across respawns; immutable
	spec  *workerSpec // what it is started with; immutable
	gen   uint64      // incremented per process; stale messages carry an old gen
	state workerState
	// retiring marks a worker to be replaced (reload, recycling): it serves
	// until its replacement is ready, then drains and is not respawned.
	retiring bool
	// keys are the certificates and keys the current process was started
	// with; its Sign requests name these.
	keys *keyring
	pid  int
	proc process
	// exited is true once the process (if any) has been reaped.
	exited bool
	// killedFor is the death reason the supervisor killed the current
	// process for ("" unless it did).
	killedFor string
	// drainAsked is true once the current process was sent Drain: its
	// exit is expected, not a death.
	drainAsked bool
	// drainDeadline is when a worker drained while the supervisor keeps
	// running (recycling, reload) is killed if it has not exited: a
	// compromised worker that ignores Drain keeps no copy of a client
	// descriptor past shutdown_grace.
	drainDeadline time.Time
	// reportedReady is true once the current process sent Ready.
	reportedReady bool
	// threads is the GOMAXPROCS the current process reported in Ready.
	threads int
	// handed is true once the current process was dispatched a connection.
	handed bool
	ch     *ipc.Conn // nil while no process is attached
	outq   []outFrame
	// wantOut is true while the channel is registered for writability
	// (and not readability) to flush outq.
	wantOut bool

	active int // connections out at this worker
	kept   int // parked plain connections whose copy it keeps (conn.kept)
	// tls is how many TLS connections' state it holds: out at it, or
	// parked with it as their keeper.
	tls      int
	served   uint64 // requests answered, over every process of the slot
	rounds   uint64 // rounds of the current process
	restarts int
	started  time.Time
	backoff  time.Duration
	retryAt  time.Time // when dead: respawn no earlier than this
	lastPong time.Time
	pingSeq  uint64
	layers   []*proto.SandboxLayer

	// slots caps the process's requests started and not yet answered
	// (ipc_max_in_flight_requests); a new one per process.
	slots *ipc.InFlight
}

// process is a started worker process: an *os.Process, a worker the
// spawner started (spawnedProc), or a test's fake.
type process interface {
	Kill() error
}

// spawnResult is what a spawning goroutine posts back to the loop.
type spawnResult struct {
	slot int
	gen  uint64
	ch   *ipc.Conn
	proc process
	pid  int
	err  error
}

// spawnedProc is a worker started by the spawner, which alone may signal it.
type spawnedProc struct {
	sp  *spawner.Client
	pid int
}

// Kill asks the spawner to kill the worker.
func (p spawnedProc) Kill() error { return p.sp.Kill(p.pid) }

// exitResult reports a worker process's end.
type exitResult struct {
	slot   int
	gen    uint64
	status string
	signal syscall.Signal // 0 when it exited normally
	code   int
}

// spawnWorker starts one worker process and waits for it, posting its start and
// its exit to the loop. It runs on its own goroutine locked to its OS thread
// for the child's whole life, because Pdeathsig fires when the creating thread
// exits (golang/go#27505).
func (s *Supervisor) spawnWorker(slot int, gen uint64, spec *workerSpec) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	ch, theirs, err := ipc.Pair()
	if err != nil {
		s.post(spawnResult{slot: slot, gen: gen, err: err})
		return
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		ch.Close()
		theirs.Close()
		s.post(spawnResult{slot: slot, gen: gen, err: err})
		return
	}
	if s.spawner != nil {
		s.spawnVia(slot, gen, spec, ch, theirs, pr, pw)
		return
	}
	attr := spec.procAttr()
	roots := spec.roots
	var trees []*os.File
	if sandbox.NeedsRootTrees(attr) && len(roots) > 0 {
		// The worker cannot bind a directory opened in this mount
		// namespace: it is given mount trees of its roots.
		trees, err = sandbox.RootTrees(s.opts.WorkerPath, spawner.TreeHelperArgs(s.spawnerArgs()), attr, roots)
		if err != nil {
			ch.Close()
			theirs.Close()
			pr.Close()
			pw.Close()
			s.post(spawnResult{slot: slot, gen: gen, err: fmt.Errorf("starting worker: %w", err)})
			return
		}
		roots = trees
	}
	cmd := &exec.Cmd{
		Path:        s.opts.WorkerPath,
		Args:        append([]string{s.opts.WorkerPath}, spec.args...),
		Env:         []string{},
		Stdout:      pw,
		Stderr:      pw,
		ExtraFiles:  append([]*os.File{theirs}, roots...), // fds 3, 4..
		SysProcAttr: attr,
	}
	err = cmd.Start()
	theirs.Close()
	pw.Close()
	closeFiles(trees)
	if err != nil {
		ch.Close()
		pr.Close()
		s.post(spawnResult{slot: slot, gen: gen, err: fmt.Errorf("starting worker: %w", err)})
		return
	}
	out := logrelay.NewWorkerOutput(s.log, slot, cmd.Process.Pid, &s.logDropped)
	relayed := make(chan struct{})
	go func() {
		out.Run(pr)
		pr.Close()
		close(relayed)
	}()
	s.post(spawnResult{slot: slot, gen: gen, ch: ch, proc: cmd.Process, pid: cmd.Process.Pid})

	err = cmd.Wait()
	<-relayed
	res := exitResult{slot: slot, gen: gen, status: "exited"}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
		switch {
		case ws.Signaled():
			res.signal = ws.Signal()
			res.status = "killed by " + unixSignalName(ws.Signal())
		case ws.Exited():
			res.code = ws.ExitStatus()
			res.status = fmt.Sprintf("exited with status %d", res.code)
		}
	} else if err != nil {
		res.status = err.Error()
	}
	s.post(res)
}

// spawnVia has the spawner start the worker (the supervisor started as
// root keeps no privilege to do it itself) and waits for its end.
func (s *Supervisor) spawnVia(slot int, gen uint64, spec *workerSpec, ch *ipc.Conn, theirs, pr, pw *os.File) {
	pid, exit, err := s.spawner.Spawn(spec.args, theirs, pw, spec.roots)
	theirs.Close()
	pw.Close()
	if err != nil {
		ch.Close()
		pr.Close()
		s.post(spawnResult{slot: slot, gen: gen, err: fmt.Errorf("starting worker: %w", err)})
		return
	}
	out := logrelay.NewWorkerOutput(s.log, slot, pid, &s.logDropped)
	relayed := make(chan struct{})
	go func() {
		out.Run(pr)
		pr.Close()
		close(relayed)
	}()
	s.post(spawnResult{slot: slot, gen: gen, ch: ch, proc: spawnedProc{sp: s.spawner, pid: pid}, pid: pid})
	e := <-exit
	<-relayed
	res := exitResult{slot: slot, gen: gen, status: "exited"}
	switch {
	case e.Err != nil:
		res.status = e.Err.Error()
	case e.Signal != 0:
		res.signal = e.Signal
		res.status = "killed by " + unixSignalName(e.Signal)
	default:
		res.code = e.Code
		res.status = fmt.Sprintf("exited with status %d", res.code)
	}
	s.post(res)
}

func unixSignalName(sig syscall.Signal) string {
	name := sig.String()
	return fmt.Sprintf("signal %d (%s)", int(sig), name)
}

// token identifies this process of the slot to the poller: a stale event
// for an earlier process of the same slot finds another generation.
func (w *workerProc) token() uint64 { return uint64(w.slot)&slotMask | w.gen<<slotBits }

const (
	slotBits = 24
	slotMask = 1<<slotBits - 1
)

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}
