//go:build linux

package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The epoll engine drives plain HTTP as wrk does: a few event loops, each
// on its own thread with its own epoll set and its share of the clients,
// nonblocking sockets, edge-triggered events, and no goroutine, netpoller
// or scheduler wake-up per request. A `Connection: close` request costs
// the client socket, setsockopt, bind, connect, epoll_ctl, write, read and
// close, which keeps its share of a small machine's CPU low.

const (
	stIdle = iota
	stConnecting
	stWaiting
	stBackoff
)

type econn struct {
	id        int
	fd        int
	state     int
	t0        time.Time // the request's start (its connect's, for a new connection)
	retryAt   time.Time
	fresh     bool // connected for this request
	nextSrc   int
	nextPath  int
	partial   []byte // a head split over reads
	headDone  bool
	closeBody bool  // the body runs to the end of the stream
	remain    int64 // body bytes still to come
	got       int64 // bytes of this response so far
	h         head
}

type loop struct {
	counters
	cfg     *config
	target  unix.SockaddrInet4
	srcs    []unix.SockaddrInet4
	ep      int
	conns   []*econn
	buf     []byte
	backoff int
	evs     []unix.EpollEvent
}

// runEpoll runs the clients on threads event loops and returns their
// counters once every loop has stopped. ready is called once the
// keep-alive connections are open: it starts the clock (cfg.stop).
func runEpoll(cfg *config, threads int, ready func()) ([]*counters, error) {
	ta, err := net.ResolveTCPAddr("tcp4", cfg.addr)
	if err != nil {
		return nil, err
	}
	var target unix.SockaddrInet4
	target.Port = ta.Port
	copy(target.Addr[:], ta.IP.To4())
	srcs := make([]unix.SockaddrInet4, len(cfg.sources))
	for i, ip := range cfg.sources {
		copy(srcs[i].Addr[:], ip.To4())
	}
	loops := make([]*loop, threads)
	for i := range loops {
		ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err != nil {
			return nil, err
		}
		loops[i] = &loop{counters: newCounters(), cfg: cfg, target: target, srcs: srcs, ep: ep,
			buf: make([]byte, 64<<10), evs: make([]unix.EpollEvent, 256)}
	}
	for i := 0; i < cfg.conns; i++ {
		l := loops[i%threads]
		l.conns = append(l.conns, &econn{id: len(l.conns), fd: -1, nextSrc: i, nextPath: i})
	}
	var opened, done sync.WaitGroup
	start := make(chan struct{})
	for _, l := range loops {
		opened.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			if cfg.keep {
				l.open()
			}
			opened.Done()
			<-start
			l.run()
			unix.Close(l.ep)
		}()
	}
	opened.Wait()
	ready()
	close(start)
	done.Wait()
	out := make([]*counters, len(loops))
	for i, l := range loops {
		out[i] = &l.counters
	}
	return out, nil
}

// open connects every keep-alive client of l before the clock starts.
func (l *loop) open() {
	for _, c := range l.conns {
		l.connect(c, time.Now())
	}
	deadline := time.Now().Add(l.cfg.timeout)
	for time.Now().Before(deadline) {
		pending := 0
		for _, c := range l.conns {
			if c.state == stConnecting {
				pending++
			}
		}
		if pending == 0 {
			return
		}
		n, err := unix.EpollWait(l.ep, l.evs, 100)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return
		}
		for _, ev := range l.evs[:max(n, 0)] {
			c := l.conns[ev.Fd]
			if c.state != stConnecting {
				continue
			}
			if ev.Events&(unix.EPOLLERR|unix.EPOLLHUP) != 0 {
				l.fail(c, soError(c.fd))
				l.drop(c)
				c.state = stIdle
				continue
			}
			if ev.Events&unix.EPOLLOUT != 0 {
				c.state = stIdle
			}
		}
	}
}

func (l *loop) run() {
	cfg := l.cfg
	now := time.Now()
	l.backoff = 0
	for _, c := range l.conns {
		c.state = stIdle
		l.next(c, now)
	}
	lastScan := now
	for {
		now = time.Now()
		busy := 0
		for _, c := range l.conns {
			if c.state == stConnecting || c.state == stWaiting {
				busy++
			}
		}
		if busy == 0 && (l.backoff == 0 || !now.Before(cfg.stop)) || !now.Before(cfg.hardStop) {
			break
		}
		timeout := 100
		if l.backoff > 0 {
			timeout = 1
		}
		n, err := unix.EpollWait(l.ep, l.evs, timeout)
		if err != nil && !errors.Is(err, unix.EINTR) {
			break
		}
		for _, ev := range l.evs[:max(n, 0)] {
			l.event(l.conns[ev.Fd], ev.Events)
		}
		now = time.Now()
		if l.backoff > 0 || now.Sub(lastScan) > 100*time.Millisecond {
			lastScan = now
			for _, c := range l.conns {
				switch {
				case c.state == stBackoff && !now.Before(c.retryAt):
					l.backoff--
					c.state = stIdle
					l.next(c, now)
				case (c.state == stConnecting || c.state == stWaiting) && now.Sub(c.t0) > cfg.timeout:
					l.fail(c, errTimeout)
					l.drop(c)
					l.retry(c, now)
				}
			}
		}
	}
	for _, c := range l.conns {
		l.drop(c)
	}
}

var errTimeout = errors.New("timeout")

// next starts c's next request, if the run is still on: on its kept-alive
// connection, or on a new one.
func (l *loop) next(c *econn, now time.Time) {
	cfg := l.cfg
	if !now.Before(cfg.stop) || cfg.budget != nil && cfg.budget.Add(-1) < 0 {
		c.state = stIdle
		return
	}
	c.t0 = now
	if c.fd < 0 {
		l.connect(c, now)
		return
	}
	c.fresh = false
	l.send(c)
}

func (l *loop) connect(c *econn, now time.Time) {
	c.t0, c.fresh = now, true
	src := &l.srcs[c.nextSrc%len(l.srcs)]
	c.nextSrc += l.cfg.conns
	l.dials++
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err == nil {
		c.fd = fd
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1)
	}
	if err == nil {
		err = unix.Bind(fd, src)
	}
	if err == nil {
		err = unix.Connect(fd, &l.target)
		if errors.Is(err, unix.EINPROGRESS) {
			err = nil
		}
	}
	if err == nil {
		err = unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{
			Events: unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET, Fd: int32(c.id)})
	}
	if err != nil {
		l.fail(c, &net.OpError{Op: "dial", Err: err})
		l.drop(c)
		l.retry(c, now)
		return
	}
	c.state = stConnecting
}

func (l *loop) send(c *econn) {
	req := l.cfg.reqs[c.nextPath%len(l.cfg.reqs)]
	c.nextPath++
	c.partial, c.headDone, c.got, c.state = c.partial[:0], false, 0, stWaiting
	n, err := unix.Write(c.fd, req)
	if err == nil && n != len(req) {
		err = fmt.Errorf("short write of %d bytes", n)
	}
	if err != nil {
		l.lost(c, &net.OpError{Op: "write", Err: err})
	}
}

func (l *loop) event(c *econn, events uint32) {
	switch c.state {
	case stConnecting:
		if events&(unix.EPOLLERR|unix.EPOLLHUP) != 0 {
			l.fail(c, &net.OpError{Op: "dial", Err: soError(c.fd)})
			l.drop(c)
			l.retry(c, time.Now())
			return
		}
		if events&unix.EPOLLOUT != 0 {
			l.send(c)
		}
	case stWaiting:
		if events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
			l.read(c)
		}
	}
}

// read consumes what c's socket holds, until its response is complete or
// the socket has no more for now.
func (l *loop) read(c *econn) {
	for {
		n, err := unix.Read(c.fd, l.buf)
		if errors.Is(err, unix.EAGAIN) {
			return
		}
		if err != nil {
			l.lost(c, &net.OpError{Op: "read", Err: err})
			return
		}
		if n == 0 {
			if c.headDone && c.closeBody {
				l.complete(c)
				return
			}
			l.lost(c, errEOF)
			return
		}
		if l.consume(c, l.buf[:n]) {
			return
		}
	}
}

var errEOF = errors.New("eof")

// consume takes b, the next bytes of c's response, and reports whether the
// response is complete (or failed).
func (l *loop) consume(c *econn, b []byte) bool {
	c.got += int64(len(b))
	if !c.headDone {
		data := b
		if len(c.partial) > 0 {
			c.partial = append(c.partial, b...)
			data = c.partial
		}
		end := bytes.Index(data, []byte("\r\n\r\n"))
		if end < 0 {
			if len(c.partial) == 0 {
				c.partial = append(c.partial, b...)
			}
			if len(c.partial) > 64<<10 {
				l.lost(c, errMalformed)
				return true
			}
			return false
		}
		h, err := parseHead(data[:end+4])
		if err != nil {
			l.lost(c, err)
			return true
		}
		if h.chunked {
			l.lost(c, errors.New("chunked body (use -engine go)"))
			return true
		}
		c.h, c.headDone = h, true
		c.closeBody = h.length < 0
		c.remain = h.length - int64(len(data)-end-4)
	} else {
		c.remain -= int64(len(b))
	}
	if !c.closeBody && c.remain <= 0 {
		l.complete(c)
		return true
	}
	return false
}

func (l *loop) complete(c *econn) {
	now := time.Now()
	l.lat.add(now.Sub(c.t0))
	l.total++
	if !now.After(l.cfg.stop) {
		l.inWindow++
	}
	l.bytes += c.got
	if c.h.status/100 != 2 {
		l.non2xx++
	}
	c.state = stIdle
	if !l.cfg.keep || c.h.close || c.closeBody {
		l.drop(c)
	}
	l.next(c, now)
}

// lost ends c's request on an error; a kept-alive connection the server
// closed before answering a byte is redialled and the request sent again,
// counted as "closed between requests".
func (l *loop) lost(c *econn, err error) {
	now := time.Now()
	l.drop(c)
	if l.cfg.keep && !c.fresh && c.got == 0 {
		l.errs["closed between requests"]++
		t0 := c.t0
		c.nextPath--
		l.connect(c, now)
		c.t0 = t0
		return
	}
	l.fail(c, err)
	l.retry(c, now)
}

// retry starts c again after a millisecond: a server refusing connections
// is not hammered at the cost of the client's CPU.
func (l *loop) retry(c *econn, now time.Time) {
	c.state, c.retryAt = stBackoff, now.Add(time.Millisecond)
	l.backoff++
}

func (l *loop) fail(c *econn, err error) {
	l.failed++
	l.errs[kind(err)]++
}

func (l *loop) drop(c *econn) {
	if c.fd >= 0 {
		unix.Close(c.fd) // closing also takes it out of the epoll set
		c.fd = -1
	}
}

func soError(fd int) error {
	v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
	if err != nil {
		return err
	}
	if v == 0 {
		return errors.New("connection failed")
	}
	return unix.Errno(v)
}

// kind buckets an engine error as errkind does the net package's.
func kind(err error) string {
	var oe *net.OpError
	if errors.As(err, &oe) {
		return oe.Op + ": " + oe.Err.Error()
	}
	if errors.Is(err, errTimeout) {
		return "timeout"
	}
	if errors.Is(err, errEOF) {
		return "eof"
	}
	return strconv.Quote(err.Error())
}
