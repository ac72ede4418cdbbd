// Package ipctest provides a fake worker for tests of the supervisor: the
// worker's end of a real channel (a SEQPACKET socketpair made by ipc.Pair),
// driven by the test instead of a worker process. It answers Ping by itself
// and, like a worker with no rounds in flight, closes its end on Drain.
package ipctest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/proto"
	"golang.org/x/sys/unix"
)

// ErrTimeout is returned by Next when no frame came in time.
var ErrTimeout = errors.New("ipctest: no frame in time")

// Frame is a frame the fake worker received, with its descriptor (-1 for
// none), which the test owns.
type Frame struct {
	*proto.Frame
	FD int
}

// Worker is a fake worker. Its methods are safe for concurrent use.
type Worker struct {
	s      *ipc.Stream
	frames chan Frame
	exited chan struct{}
	once   sync.Once
	pongs  atomic.Int64
	// err is why the reader stopped: ipc.ErrClosed when the supervisor
	// closed its end, nil on Drain; written by the reader alone, before
	// exited is closed.
	err error
}

// New makes a channel: the supervisor's end, and a fake worker on the other.
func New() (*ipc.Conn, *Worker, error) {
	c, theirs, err := ipc.Pair()
	if err != nil {
		return nil, nil, err
	}
	s, err := ipc.NewStream(theirs)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	w := &Worker{s: s, frames: make(chan Frame, 1024), exited: make(chan struct{})}
	go w.read()
	return c, w, nil
}

func (w *Worker) read() {
	defer close(w.exited)
	defer w.Close()
	for {
		f := new(proto.Frame)
		fd, err := w.s.Recv(f)
		if err != nil {
			w.err = err
			return
		}
		switch b := f.Body.(type) {
		case *proto.Frame_Ping:
			w.pongs.Add(1)
			w.s.Send(&proto.Frame{Body: &proto.Frame_Pong{Pong: &proto.Pong{Seq: b.Ping.GetSeq()}}}, -1)
			continue
		case *proto.Frame_Drain:
			return
		}
		select {
		case w.frames <- Frame{Frame: f, FD: fd}:
		default:
			if fd >= 0 {
				unix.Close(fd)
			}
			w.err = errors.New("ipctest: more than 1024 frames unread")
			return
		}
	}
}

// Next returns the next frame other than a Ping, waiting at most timeout.
func (w *Worker) Next(timeout time.Duration) (Frame, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case f := <-w.frames:
		return f, nil
	case <-t.C:
		return Frame{FD: -1}, ErrTimeout
	case <-w.exited:
		// Frames that came before the end are still returned.
		select {
		case f := <-w.frames:
			return f, nil
		default:
		}
		return Frame{FD: -1}, fmt.Errorf("ipctest: channel ended: %w", w.err)
	}
}

// TryNext returns the next frame other than a Ping if one is there, without
// waiting.
func (w *Worker) TryNext() (Frame, bool) {
	select {
	case f := <-w.frames:
		return f, true
	default:
		return Frame{FD: -1}, false
	}
}

// Send writes a frame, with fd attached when fd >= 0.
func (w *Worker) Send(f *proto.Frame, fd int) error { return w.s.Send(f, fd) }

// Ready reports the worker ready, with no sandbox layers.
func (w *Worker) Ready() error {
	return w.Send(&proto.Frame{Body: &proto.Frame_Ready{Ready: &proto.Ready{}}}, -1)
}

// Done hands a connection back.
func (w *Worker) Done(d *proto.Done) error {
	return w.Send(&proto.Frame{Body: &proto.Frame_Done{Done: d}}, -1)
}

// Pongs is how many pings the fake answered.
func (w *Worker) Pongs() int64 { return w.pongs.Load() }

// Exited is closed once the fake's end is closed: by Close, on Drain, or
// when the supervisor closed its end.
func (w *Worker) Exited() <-chan struct{} { return w.exited }

// Err is why the fake's reader stopped, once Exited is closed.
func (w *Worker) Err() error {
	<-w.exited
	return w.err
}

// Close closes the fake's end, as a worker process's end closes when it
// exits; Exited follows once the reader has stopped.
func (w *Worker) Close() error {
	w.once.Do(func() { w.s.Close() })
	return nil
}
