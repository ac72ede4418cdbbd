// Package relay copies an upgraded connection's bytes both ways between the
// client and the upstream until both ends are done, splicing where the
// kernel allows (docs/DESIGN.md §10): ends are passed on as half-closes,
// idle and fin waits bound it. It knows nothing of rounds or handlers.
package relay

import (
	"errors"
	"io"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// relayFinWait bounds how long the other direction of a relay may go on
// after one side closed its end (HAProxy's client-fin/server-fin).
const relayFinWait = 5 * time.Second

// relayBufSize is the buffer of one direction of the copy loop.
const relayBufSize = 16 << 10

// relayState is what both directions of one relay share: the time of the
// last byte either way, and the end set once one side has closed.
type relayState struct {
	idle time.Duration
	last atomic.Int64 // UnixNano
	end  atomic.Int64 // UnixNano, 0 while both sides are open
}

// deadline is when the relay gives up waiting: idle after the last byte in
// either direction, or the fin wait once one side has closed.
func (s *relayState) deadline() time.Time {
	d := time.Unix(0, s.last.Load()).Add(s.idle)
	if e := s.end.Load(); e != 0 && e < d.UnixNano() {
		return time.Unix(0, e)
	}
	return d
}

// waitAgain reports whether a read that timed out should wait again: the
// other direction moved bytes since it began.
func (s *relayState) waitAgain(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded) && time.Now().Before(s.deadline())
}

func (s *relayState) touch() { s.last.Store(time.Now().UnixNano()) }

// Conn is one side of a relay: a socket under the runtime's poller
// (SocketSide), or a TLS connection over one (TLSSide).
type Conn interface {
	io.ReadWriter
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
	// closeWrite passes the other side's EOF on: the peer reads an end,
	// and may still send.
	closeWrite()
	// abort ends the connection both ways at once, waking any read or
	// write of the relay's on it.
	abort()
}

// socketSide is a plain socket as a side of a relay; it splices.
type socketSide struct {
	Socket
}

// SocketSide is s as a side of a relay.
func SocketSide(s Socket) Conn { return socketSide{s} }

// Socket is a socket under the runtime's poller.
type Socket interface {
	io.ReadWriter
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
	syscall.Conn
}

func (s socketSide) closeWrite() { shutdown(s, unix.SHUT_WR) }
func (s socketSide) abort()      { shutdown(s, unix.SHUT_RDWR) }

// Run copies both directions between client and upstream until both
// have ended: a side's EOF is passed on as a half-close (closeWrite) and
// the other direction then has relayFinWait to finish; an error, or idle
// without a byte either way, ends both (abort). pre are bytes already read
// from each side. Each direction is spliced where the kernel allows and
// both sides are sockets, else copied. One direction runs on the calling
// goroutine, the other on one more. It returns the bytes sent to the
// client and to the upstream.
func Run(client, upstream Conn, toUpstream, toClient []byte, idle time.Duration) (toClientN, toUpstreamN int64) {
	s := &relayState{idle: idle}
	s.touch()
	down := make(chan int64, 1)
	go func() {
		n := s.direction(client, upstream, toClient)
		down <- n
	}()
	toUpstreamN = s.direction(upstream, client, toUpstream)
	toClientN = <-down
	return toClientN, toUpstreamN
}

// direction relays src to dst until src ends, then half-closes dst and
// makes the other direction finish within relayFinWait.
func (s *relayState) direction(dst, src Conn, pre []byte) int64 {
	var n int64
	err := s.writeAll(dst, pre)
	if err == nil {
		n = int64(len(pre))
		var m int64
		m, err = s.splice(dst, src)
		if errors.Is(err, errNoSplice) {
			var k int64
			k, err = s.copy(dst, src)
			m += k
		}
		n += m
	}
	// This side is done: the peer learns it at once, and the other
	// direction gets a short while to end on its own.
	s.end.CompareAndSwap(0, time.Now().Add(relayFinWait).UnixNano())
	if err == nil {
		dst.closeWrite()
	} else {
		// A failed or idle side ends the whole relay.
		s.end.Store(time.Now().UnixNano())
		dst.abort()
		src.abort()
	}
	src.SetReadDeadline(time.Now())
	dst.SetReadDeadline(s.deadline())
	return n
}

// writeAll writes p to dst under the relay's deadline.
func (s *relayState) writeAll(dst Conn, p []byte) error {
	for len(p) > 0 {
		dst.SetWriteDeadline(time.Now().Add(s.idle))
		n, err := dst.Write(p)
		if err != nil {
			return err
		}
		p = p[n:]
	}
	return nil
}

// copy is the portable direction: read into a buffer, write it out.
func (s *relayState) copy(dst, src Conn) (int64, error) {
	buf := make([]byte, relayBufSize)
	var total int64
	for {
		src.SetReadDeadline(s.deadline())
		n, err := src.Read(buf)
		if n > 0 {
			s.touch()
			if werr := s.writeAll(dst, buf[:n]); werr != nil {
				return total, werr
			}
			total += int64(n)
			s.touch()
		}
		switch {
		case err == io.EOF:
			return total, nil
		case err != nil && s.waitAgain(err):
		case err != nil:
			return total, err
		}
	}
}

// shutdown shuts a socket down in direction how.
func shutdown(c syscall.Conn, how int) {
	if rc, err := c.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { unix.Shutdown(int(fd), how) })
	}
}

// errNoSplice is splice's answer when the kernel cannot splice this pair.
var errNoSplice = errors.New("relay: splice not available")
