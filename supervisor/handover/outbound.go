package handover

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/sandbox"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
	protobuf "google.golang.org/protobuf/proto"
)

// Listener is one listening socket the old supervisor passes on.
type Listener struct {
	Name    string
	Address string // as the configuration asked for it
	FD      int
}

// Start describes the new binary's start.
type Start struct {
	Path string
	Args []string // after the program name; the hand-over socket is fd 3
	Env  []string
	// Listeners and AdminFD (-1: none) are sent, not taken: the caller
	// closes its descriptors.
	Listeners []Listener
	AdminFD   int
	// Version is this binary's, for the new one's log.
	Version string
	// Timeout bounds the wait for the new supervisor's Ready.
	Timeout time.Duration
	Log     hclog.Logger
	// Launch, when set, starts the new binary in place of Begin's own
	// exec of Path (a root-started gatehouse's launcher): it is given the
	// new process's end of the hand-over socket for its fd 3.
	Launch func(handover *os.File) (Launched, error)
}

// Launched is a new binary's process as Begin watches it.
type Launched struct {
	// Exited yields how the process ended.
	Exited <-chan error
	Kill   func()
}

// execStart starts o.Path itself, with the hand-over socket as fd 3.
func execStart(o Start, handover *os.File) (Launched, error) {
	cmd := exec.Command(o.Path, o.Args...)
	cmd.Env = o.Env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{handover}
	if err := sandbox.Start(cmd); err != nil {
		return Launched{}, fmt.Errorf("starting %s: %w", o.Path, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	return Launched{Exited: exited, Kill: func() { cmd.Process.Kill() }}, nil
}

// Outbound is the old supervisor's end once the new one is ready: the loop
// queues frames on it (never blocking), a goroutine of its own sends them.
type Outbound struct {
	s       sock
	log     hclog.Logger
	PID     int
	Version string

	mu      sync.Mutex
	queue   []item
	closing bool
	wake    chan struct{}
	done    chan struct{} // closed once the socket is closed
	// sent counts the connections sent; lost those whose send failed.
	sent, lost int

	batch      []*proto.HandedConn
	batchFDs   []int
	batchBytes int
}

type item struct {
	m   *proto.Handover
	fds []int
}

// Begin starts the new binary, passes it the listeners and the admin socket
// and waits until it reports its workers ready. An error leaves nothing
// running: the new process is gone, and the old supervisor serves on.
func Begin(ctx context.Context, o Start) (*Outbound, error) {
	parent, child, err := Pair()
	if err != nil {
		return nil, err
	}
	cf := os.NewFile(uintptr(child), "handover")
	start := o.Launch
	if start == nil {
		start = func(f *os.File) (Launched, error) { return execStart(o, f) }
	}
	p, err := start(cf)
	cf.Close()
	if err != nil {
		unix.Close(parent)
		return nil, err
	}
	s := sock{fd: parent}
	exited := make(chan error, 1)
	go func() { exited <- <-p.Exited }()
	fail := func(err error) (*Outbound, error) {
		s.close()
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			p.Kill()
			<-exited
		}
		return nil, err
	}
	ls := &proto.HandoverListeners{Admin: o.AdminFD >= 0, Version: o.Version}
	var fds []int
	for _, l := range o.Listeners {
		ls.Listeners = append(ls.Listeners, &proto.HandoverListener{Name: l.Name, Address: l.Address})
		fds = append(fds, l.FD)
	}
	if o.AdminFD >= 0 {
		fds = append(fds, o.AdminFD)
	}
	if err := s.send(&proto.Handover{Body: &proto.Handover_Listeners{Listeners: ls}}, fds); err != nil {
		if how := waitBriefly(exited); how != nil {
			return fail(fmt.Errorf("the new binary exited before it was ready: %v", how))
		}
		p.Kill()
		return fail(fmt.Errorf("the new binary did not take the listeners: %w", err))
	}
	type reply struct {
		m   *proto.Handover
		err error
	}
	replies := make(chan reply, 1)
	go func() {
		buf, oob := recvBufs()
		m, fds, err := s.recv(buf, oob)
		closeAll(fds)
		replies <- reply{m, err}
	}()
	timer := time.NewTimer(o.Timeout)
	defer timer.Stop()
	select {
	case r := <-replies:
		if ready := r.m.GetReady(); ready != nil {
			return Attach(parent, int(ready.GetPid()), ready.GetVersion(), o.Log), nil
		}
		if f := r.m.GetFailed(); f != nil {
			return fail(errors.New(f.GetReason()))
		}
		if errors.Is(r.err, ErrFormat) {
			p.Kill()
			return fail(fmt.Errorf("the new binary speaks another hand-over format: %w", r.err))
		}
		// The socket ended without a word: the binary is not a gatehouse
		// that takes over, or it exited.
		if how := waitBriefly(exited); how != nil {
			return fail(fmt.Errorf("the new binary exited before it was ready: %v", how))
		}
		p.Kill()
		return fail(fmt.Errorf("the new binary did not answer on the hand-over socket: %v", r.err))
	case err := <-exited:
		exited <- err
		// A binary that failed says why before it exits: its reason is
		// in the socket still, whichever of the two came first here.
		select {
		case r := <-replies:
			if f := r.m.GetFailed(); f != nil {
				return fail(errors.New(f.GetReason()))
			}
		case <-time.After(time.Second):
		}
		return fail(fmt.Errorf("the new binary exited before it was ready: %v", exitText(err)))
	case <-timer.C:
		p.Kill()
		return fail(fmt.Errorf("the new binary was not ready within %v; killed it", o.Timeout))
	case <-ctx.Done():
		p.Kill()
		return fail(ctx.Err())
	}
}

// Attach is the old side's end of a hand-over socket fd whose peer (pid,
// version) is ready: Begin's result, or a test's.
func Attach(fd, pid int, version string, log hclog.Logger) *Outbound {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	out := &Outbound{s: sock{fd: fd}, log: log, PID: pid, Version: version, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go out.run()
	return out
}

// waitBriefly waits a moment for the process to exit and describes how.
func waitBriefly(exited chan error) error {
	select {
	case err := <-exited:
		exited <- err
		return errors.New(exitText(err))
	case <-time.After(2 * time.Second):
		return nil
	}
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// Queue sends m with fds, which it takes, after everything queued before.
// It never blocks: the loop calls it.
func (o *Outbound) Queue(m *proto.Handover, fds []int) {
	o.mu.Lock()
	if o.closing {
		o.mu.Unlock()
		closeAll(fds)
		return
	}
	o.queue = append(o.queue, item{m: m, fds: fds})
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// Add appends one connection, its descriptor taken, to the batch being
// built; a full batch is queued.
func (o *Outbound) Add(c *proto.HandedConn, fd int) {
	o.batch = append(o.batch, c)
	o.batchFDs = append(o.batchFDs, fd)
	o.batchBytes += protobuf.Size(c)
	if len(o.batch) >= MaxBatch || o.batchBytes >= batchBytes {
		o.Flush()
	}
}

// Flush queues the batch being built, if any.
func (o *Outbound) Flush() {
	if len(o.batch) == 0 {
		return
	}
	o.Queue(&proto.Handover{Body: &proto.Handover_Conns{Conns: &proto.HandoverConns{Conns: o.batch}}}, o.batchFDs)
	o.batch, o.batchFDs, o.batchBytes = nil, nil, 0
}

// Close flushes, sends what is queued, then closes the socket: the new
// supervisor reads its end. It returns at once.
func (o *Outbound) Close() {
	o.Flush()
	o.mu.Lock()
	o.closing = true
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// Counts reports the connections sent so far, and those lost to a failed
// send.
func (o *Outbound) Counts() (sent, lost int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.sent, o.lost
}

// Wait returns once everything queued before Close was sent, or lost to a
// failed socket, and the socket is closed.
func (o *Outbound) Wait() { <-o.done }

func (o *Outbound) run() {
	defer close(o.done)
	var failed error
	for range o.wake {
		o.mu.Lock()
		q, closing := o.queue, o.closing
		o.queue = nil
		o.mu.Unlock()
		for _, it := range q {
			n := len(it.m.GetConns().GetConns())
			if failed == nil {
				failed = o.s.send(it.m, it.fds)
				if failed != nil {
					o.log.Error("hand-over socket failed: connections still to send are closed", "error", failed)
				}
			}
			o.mu.Lock()
			if failed == nil {
				o.sent += n
			} else {
				o.lost += n
			}
			o.mu.Unlock()
			closeAll(it.fds)
		}
		if closing {
			// Queue takes nothing once closing is set: q was the last.
			o.s.close()
			return
		}
	}
}
