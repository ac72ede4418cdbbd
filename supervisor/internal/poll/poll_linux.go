package poll

import (
	"encoding/binary"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Poller is an epoll set plus an eventfd for Wake.
//
// Every field except the wake group is owned by the goroutine that calls
// Add, Mod, Del, Wait and Close.
type Poller struct {
	epfd   int               // epoll fd; -1 after Close
	evbuf  []unix.EpollEvent // Wait's scratch, grown to len(events)
	closed atomic.Bool       // set by Close before the fds are closed

	// wakePending is true from the first Wake until Wait drains the
	// eventfd; further Wakes skip the write (coalescing).
	wakePending atomic.Bool
	// wakeMu guards efd against Close running concurrently with Wake, so
	// Wake never writes to a closed (and possibly reused) descriptor.
	wakeMu sync.Mutex
	efd    int // eventfd, registered with WakeToken; -1 after Close
}

// New returns a Poller backed by epoll. Its epoll fd and eventfd are
// close-on-exec; the Poller owns them until Close.
func New() (*Poller, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(epfd)
		return nil, os.NewSyscallError("eventfd", err)
	}
	p := &Poller{epfd: epfd, efd: efd}
	if err := p.ctl(unix.EPOLL_CTL_ADD, efd, WakeToken, In); err != nil {
		unix.Close(efd)
		unix.Close(epfd)
		return nil, err
	}
	return p, nil
}

// epollEvents translates an Interest to epoll flags.
func epollEvents(in Interest) uint32 {
	var ev uint32
	if in&In != 0 {
		ev |= unix.EPOLLIN | unix.EPOLLRDHUP
	}
	if in&Out != 0 {
		ev |= unix.EPOLLOUT
	}
	if in&OneShot != 0 {
		ev |= unix.EPOLLONESHOT
	}
	return ev
}

func (p *Poller) ctl(op, fd int, token uint64, in Interest) error {
	// epoll_data is 64 bits; x/sys/unix splits it into Fd (low half) and
	// Pad (high half) on every architecture.
	ev := unix.EpollEvent{
		Events: epollEvents(in),
		Fd:     int32(uint32(token)),
		Pad:    int32(uint32(token >> 32)),
	}
	for {
		err := unix.EpollCtl(p.epfd, op, fd, &ev)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return os.NewSyscallError("epoll_ctl", err)
		}
		return nil
	}
}

// Add registers fd with token and interest. Adding a registered fd fails
// with EEXIST. The caller keeps ownership of fd.
func (p *Poller) Add(fd int, token uint64, in Interest) error {
	if p.closed.Load() {
		return ErrClosed
	}
	if token == WakeToken {
		return ErrWakeToken
	}
	return p.ctl(unix.EPOLL_CTL_ADD, fd, token, in)
}

// Mod replaces the token and interest of a registered fd, re-arming a
// OneShot registration. Modifying an unregistered fd fails with ENOENT.
func (p *Poller) Mod(fd int, token uint64, in Interest) error {
	if p.closed.Load() {
		return ErrClosed
	}
	if token == WakeToken {
		return ErrWakeToken
	}
	return p.ctl(unix.EPOLL_CTL_MOD, fd, token, in)
}

// Del removes fd. It must be called before the caller closes fd: epoll keeps
// reporting a closed fd while a duplicate of it is open elsewhere (for
// example in flight to a worker), and then it can no longer be removed.
// Deleting an unregistered fd fails with ENOENT.
func (p *Poller) Del(fd int) error {
	if p.closed.Load() {
		return ErrClosed
	}
	for {
		err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, fd, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return os.NewSyscallError("epoll_ctl", err)
		}
		return nil
	}
}

// Wait blocks up to timeout (negative: forever; 0: poll) and fills events;
// it returns how many. EINTR is retried with the time that remains. A Wake
// is reported as one Event with Token WakeToken, and Wait drains it.
func (p *Poller) Wait(events []Event, timeout time.Duration) (int, error) {
	if p.closed.Load() {
		return 0, ErrClosed
	}
	if len(events) == 0 {
		return 0, ErrNoRoom
	}
	if cap(p.evbuf) < len(events) {
		p.evbuf = make([]unix.EpollEvent, len(events))
	}
	buf := p.evbuf[:len(events)]
	dl := newDeadline(timeout)
	for {
		// Under load events are often waiting already: they are taken
		// with a call that cannot block, and only an empty set is waited
		// on with a call that may.
		n, err := epollWaitNB(p.epfd, buf)
		if n == 0 && err == nil && timeout != 0 {
			n, err = unix.EpollWait(p.epfd, buf, waitMillis(dl.remaining()))
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, os.NewSyscallError("epoll_wait", err)
		}
		if n == 0 && !dl.expired() {
			continue // a wait capped below the timeout
		}
		for i, e := range buf[:n] {
			token := uint64(uint32(e.Fd)) | uint64(uint32(e.Pad))<<32
			if token == WakeToken {
				if err := p.drainWake(); err != nil {
					return 0, err
				}
				events[i] = Event{Token: WakeToken}
				continue
			}
			events[i] = Event{
				Token:    token,
				Readable: e.Events&unix.EPOLLIN != 0,
				Writable: e.Events&unix.EPOLLOUT != 0,
				HangUp:   e.Events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0,
			}
		}
		return n, nil
	}
}

// epollWaitNB is epoll_wait(2) with a zero timeout. It never blocks, so it
// is a raw call: a call made as one that may block costs the runtime's
// bookkeeping, and wakes its monitor thread when that sleeps (the whole
// process was idle), which then polls every 20 µs for a while
// (docs/DESIGN.md §2.0).
func epollWaitNB(epfd int, buf []unix.EpollEvent) (int, error) {
	n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(unsafe.SliceData(buf))), uintptr(len(buf)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// waitMillis converts a remaining time to epoll_wait's timeout, rounding up
// so a sub-millisecond remainder does not spin.
func waitMillis(d time.Duration) int {
	if d < 0 {
		return -1
	}
	ms := (d + time.Millisecond - 1) / time.Millisecond
	return int(min(ms, maxWaitMillis))
}

// drainWake empties the eventfd, then clears the pending flag. In the other
// order a Wake landing between the two would set the flag and have its write
// drained here, leaving the flag set with the eventfd empty: every later Wake
// would skip its write and never be reported. In this order such a Wake finds
// the flag still set and skips its write, and is reported by this Wait,
// whose caller handles what was posted before it.
func (p *Poller) drainWake() error {
	var b [8]byte
	for {
		_, err := unix.Read(p.efd, b[:])
		switch err {
		case nil, unix.EAGAIN:
			p.wakePending.Store(false)
			return nil
		case unix.EINTR:
			continue
		default:
			return os.NewSyscallError("read", err)
		}
	}
}

// Wake makes a concurrent or the next Wait return with a WakeToken event.
// Safe from any goroutine; many Wakes before a Wait coalesce into one event.
// It returns ErrClosed after Close.
func (p *Poller) Wake() error {
	if p.closed.Load() {
		return ErrClosed
	}
	if p.wakePending.Swap(true) {
		return nil
	}
	p.wakeMu.Lock()
	defer p.wakeMu.Unlock()
	if p.efd < 0 {
		return ErrClosed
	}
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], 1)
	for {
		_, err := unix.Write(p.efd, b[:])
		switch err {
		case nil, unix.EAGAIN: // EAGAIN: counter saturated, a wake is pending
			return nil
		case unix.EINTR:
			continue
		default:
			return os.NewSyscallError("write", err)
		}
	}
}

// Close releases the Poller's descriptors. The caller's registered fds are
// not closed. Close must not run concurrently with Wait; it may run
// concurrently with Wake.
func (p *Poller) Close() error {
	if p.closed.Swap(true) {
		return ErrClosed
	}
	p.wakeMu.Lock()
	efd := p.efd
	p.efd = -1
	p.wakeMu.Unlock()
	// Close is not retried on EINTR: the descriptor is gone either way
	// (see internal/poll/fd_unix.go in the standard library).
	err1 := unix.Close(efd)
	err2 := unix.Close(p.epfd)
	p.epfd = -1
	if err1 != nil {
		return os.NewSyscallError("close", err1)
	}
	if err2 != nil {
		return os.NewSyscallError("close", err2)
	}
	return nil
}

// fds returns the Poller's own descriptors, for tests.
func (p *Poller) fds() []int { return []int{p.epfd, p.efd} }
