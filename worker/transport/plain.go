// Package transport is the worker's I/O on a client connection: a plain
// socket read and written without the poller until a call must wait
// (Plain), and the record-at-a-time transport under crypto/tls that leaves
// the socket at a record boundary (TLS), both over internal/sysio's
// non-blocking system calls, and one write loop (sendNow). It knows
// nothing of rounds or handlers.
package transport

import (
	"errors"
	"io"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gatehouse-dev/gatehouse/internal/sysio"
)

// Plain is a plain client connection. Most rounds need no wait: the
// dispatcher hands a connection over only once its head is in the socket, and
// a small response fits the socket's buffer. So it reads and writes its
// non-blocking descriptor directly, and only the first call that would block
// puts it under the runtime's poller, with the deadlines set so far; every
// wait is bounded as before, and a round that never waits costs no poller
// registration, deregistration or *os.File (two epoll_ctl calls, an fcntl
// and three allocations per dispatch, measured).
//
// Only its server goroutine uses it, except that once under the poller
// (hotWait registers it only then) the pressure notice may move its read
// deadline from another goroutine.
type Plain struct {
	fd int
	f  *os.File // the descriptor under the poller, owning it; nil until then
	// rc is f's raw access. Under the poller the reads and writes are
	// still raw calls, and the poller is used only to wait: a call the Go
	// runtime counts as a system call wakes its monitor thread and may
	// hand the worker's one processor to another thread.
	rc syscall.RawConn
	// readFn and writeFn are the raw calls rc makes, bound once under the
	// poller; rio and wio hold their buffers and results (a read and a
	// write may run at once, as on an *os.File).
	readFn, writeFn func(uintptr) bool
	rio, wio        rawIO
	// rd and wd are the deadlines set before f exists, given to it then.
	rd, wd time.Time
	// noWait makes a read that would block fail with ErrWouldBlock
	// instead of waiting under the poller.
	noWait bool
	// drained: the last read, made directly, found the socket's input used
	// up (it returned less than it asked for, or nothing under noWait).
	drained bool
}

// ErrWouldBlock is a read's answer under SetNoWait when the socket holds
// nothing.
var ErrWouldBlock = errors.New("read would block")

// Reset makes c the connection of socket fd, not under the poller.
func (c *Plain) Reset(fd int) { *c = Plain{fd: fd} }

// FD is the socket.
func (c *Plain) FD() int { return c.fd }

// Polled reports whether the connection is under the runtime's poller
// (Poll).
func (c *Plain) Polled() bool { return c.f != nil }

// Drained reports whether the last read, made without the poller, left
// nothing in the socket: it returned fewer bytes than it asked for (the
// receive queue ran out), or found none under SetNoWait. It is false once
// under the poller, and before any read. A round that answers a client
// which asked to close learns from it, without a peek, that no input
// waits whose unread bytes would turn the close into a reset.
func (c *Plain) Drained() bool { return c.f == nil && c.drained }

// SetDrained records that the socket held no input beyond what the
// supervisor read and carried: Drained is true until the next read, as if
// that read had been this connection's own.
func (c *Plain) SetDrained() { c.drained = true }

// SetNoWait makes a read that would wait fail with ErrWouldBlock (on) while
// the connection is not under the poller, or wait again (off).
func (c *Plain) SetNoWait(on bool) { c.noWait = on }

func (c *Plain) Read(p []byte) (int, error) {
	if c.f == nil {
		if len(p) == 0 {
			return 0, nil
		}
		n, err := IgnoringEINTR(func() (int, error) { return sysio.Read(c.fd, p) })
		c.drained = err == nil && n < len(p) || err == unix.EAGAIN
		switch {
		case err == nil && n > 0:
			return n, nil
		case err == nil:
			return 0, io.EOF
		case err != unix.EAGAIN:
			return 0, &os.PathError{Op: "read", Path: "conn", Err: err}
		case c.noWait:
			return 0, ErrWouldBlock
		}
		c.Poll()
	}
	return c.polledRead(p)
}

// rawIO is the buffer of a raw call made under the poller, and its result.
type rawIO struct {
	p   []byte
	n   int
	err error
}

// polledRead reads p with raw calls under the poller: at once, and again
// each time the socket is readable, within the deadline. It fails as
// *os.File's Read does: at once when the deadline has passed, then at
// the deadline.
func (c *Plain) polledRead(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.rio = rawIO{p: p}
	n, err := c.rio.done(c.rc.Read(c.readFn), "read")
	if err == nil && n == 0 {
		return 0, io.EOF
	}
	return n, err
}

// polledWrite writes all of p with raw calls under the poller, waiting for
// room within the deadline, as *os.File's Write does.
func (c *Plain) polledWrite(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.wio = rawIO{p: p}
	return c.wio.done(c.rc.Write(c.writeFn), "write")
}

// done returns the count and the error of the raw calls, or waitErr, the
// wait's, as op's *os.PathError; it lets the buffer go.
func (r *rawIO) done(waitErr error, op string) (int, error) {
	n, err := r.n, r.err
	*r = rawIO{}
	if waitErr != nil {
		err = &os.PathError{Op: op, Path: "conn", Err: waitErr}
	}
	return n, err
}

// rawRead is readFn: one read, or false to wait when there is nothing.
func (c *Plain) rawRead(fd uintptr) bool {
	n, err := IgnoringEINTR(func() (int, error) { return sysio.Read(int(fd), c.rio.p) })
	switch {
	case err == unix.EAGAIN:
		return false
	case err != nil:
		c.rio.err = &os.PathError{Op: "read", Path: "conn", Err: err}
	}
	c.rio.n = n
	return true
}

// rawWrite is writeFn: it writes until all of the buffer is sent, or
// returns false to wait when the socket's buffer is full.
func (c *Plain) rawWrite(fd uintptr) bool {
	n, err := sendNow(len(c.wio.p)-c.wio.n, func(off int) (int, error) {
		return sysio.Write(int(fd), c.wio.p[c.wio.n+off:])
	})
	c.wio.n += n
	if err != nil {
		c.wio.err = err
		return true
	}
	return c.wio.n == len(c.wio.p)
}

func (c *Plain) Write(p []byte) (int, error) {
	if c.f != nil {
		return c.polledWrite(p)
	}
	n, err := sendNow(len(p), func(off int) (int, error) { return sysio.Write(c.fd, p[off:]) })
	if err != nil || n == len(p) {
		return n, err
	}
	// The socket's buffer is full: the rest waits under the poller, within
	// the write deadline.
	c.Poll()
	m, err := c.polledWrite(p[n:])
	return n + m, err
}

// WriteParts writes a then b as one send where the socket takes it, so
// that they leave in one segment when they fit in one (a response's
// header and body; docs/DESIGN.md §3.5), with MSG_MORE when more: the
// caller sends the rest of the response at once (sendFile). It tries the
// non-blocking send even under the poller (a connection that waited hot
// stays there), and waits under the poller, within the write deadline,
// only for what the socket did not take. a is not empty.
func (c *Plain) WriteParts(a, b []byte, more bool) (int, error) {
	total := len(a) + len(b)
	n, err := sendNow(total, func(off int) (int, error) {
		if off < len(a) {
			return sysio.SendParts(c.fd, a[off:], b, more)
		}
		return sysio.SendParts(c.fd, b[off-len(a):], nil, more)
	})
	if err != nil || n == total {
		return n, err
	}
	c.Poll()
	if n < len(a) {
		m, err := c.polledWrite(a[n:])
		if n += m; err != nil {
			return n, err
		}
	}
	m, err := c.polledWrite(b[n-len(a):])
	return n + m, err
}

// SetReadDeadline bounds every read that waits.
func (c *Plain) SetReadDeadline(t time.Time) error {
	if c.f != nil {
		return c.f.SetReadDeadline(t)
	}
	c.rd = t
	return nil
}

// SetWriteDeadline bounds every write that waits.
func (c *Plain) SetWriteDeadline(t time.Time) error {
	if c.f != nil {
		return c.f.SetWriteDeadline(t)
	}
	c.wd = t
	return nil
}

// Close closes the descriptor.
func (c *Plain) Close() error {
	if c.f != nil {
		return c.f.Close()
	}
	return sysio.Close(c.fd)
}

// Poll puts the connection under the runtime's poller, once.
func (c *Plain) Poll() *os.File {
	if c.f == nil {
		c.f = os.NewFile(uintptr(c.fd), "conn")
		// An *os.File of a socket always has a raw access.
		c.rc, _ = c.f.SyscallConn()
		c.readFn, c.writeFn = c.rawRead, c.rawWrite
		if !c.rd.IsZero() {
			c.f.SetReadDeadline(c.rd)
		}
		if !c.wd.IsZero() {
			c.f.SetWriteDeadline(c.wd)
		}
	}
	return c.f
}

// sendNow is the one non-blocking write loop: it calls send with the count
// sent so far until total bytes are sent, the socket's buffer is full
// (EAGAIN: it returns the count and no error, and the caller waits under
// the poller for the rest) or the call fails. EINTR is tried again.
func sendNow(total int, send func(off int) (int, error)) (int, error) {
	n := 0
	for n < total {
		m, err := IgnoringEINTR(func() (int, error) { return send(n) })
		if err == unix.EAGAIN {
			break
		}
		if err != nil {
			return n, &os.PathError{Op: "write", Path: "conn", Err: err}
		}
		n += m
	}
	return n, nil
}

// IgnoringEINTR calls call again while it fails with EINTR.
func IgnoringEINTR(call func() (int, error)) (int, error) {
	for {
		n, err := call()
		if err != unix.EINTR {
			return n, err
		}
	}
}
