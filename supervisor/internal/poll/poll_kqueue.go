//go:build darwin || dragonfly || freebsd || openbsd

package poll

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Poller is a kqueue plus a self-pipe for Wake.
//
// kqueue registers one filter per direction (EVFILT_READ, EVFILT_WRITE), so
// the Poller keeps a table of registrations indexed by fd. The table holds
// the token, which is therefore not stored in Kevent_t.Udata: Udata is a
// *byte in x/sys/unix, and a 64-bit token stored there would be a bogus
// pointer seen by the garbage collector (and is 32 bits on 386 and arm).
//
// Every field except the wake group is owned by the goroutine that calls
// Add, Mod, Del, Wait and Close.
type Poller struct {
	kq      int              // kqueue fd; -1 after Close
	regs    []registration   // indexed by fd; grown on Add
	kevbuf  []unix.Kevent_t  // Wait's scratch, grown to len(events)
	changes [2]unix.Kevent_t // Add/Mod/Del scratch
	disable []unix.Kevent_t  // OneShot siblings to disable at the end of Wait
	ts      unix.Timespec    // Wait's timeout, kept here so it does not escape per call
	batch   uint32           // Wait generation, for merging filters into one Event
	closed  atomic.Bool      // set by Close before the fds are closed

	// wakePending is true from the first Wake until Wait drains the pipe;
	// further Wakes skip the write (coalescing).
	wakePending atomic.Bool
	// wakeMu guards wakeW against Close running concurrently with Wake, so
	// Wake never writes to a closed (and possibly reused) descriptor.
	wakeMu sync.Mutex
	wakeW  int // write end of the wake pipe; -1 after Close
	wakeR  int // read end, registered with EVFILT_READ; owned by the Wait goroutine
}

// registration is the Poller's view of one fd's filters.
type registration struct {
	token uint64
	in    Interest // as given to Add or Mod; 0 if not registered
	batch uint32   // the Wait generation that last produced an Event for this fd
	slot  int32    // index of that Event in Wait's events
}

// New returns a Poller backed by kqueue. Its kqueue and wake pipe are
// close-on-exec; the Poller owns them until Close.
func New() (*Poller, error) {
	// x/sys/unix has no kqueue1 on these systems; hold ForkLock so no
	// fork+exec sees the fd before FD_CLOEXEC is set, as syscall does for
	// descriptors it cannot create close-on-exec atomically.
	syscall.ForkLock.RLock()
	kq, err := unix.Kqueue()
	if err == nil {
		unix.CloseOnExec(kq)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, os.NewSyscallError("kqueue", err)
	}
	r, w, err := newWakePipe()
	if err != nil {
		unix.Close(kq)
		return nil, err
	}
	p := &Poller{kq: kq, wakeR: r, wakeW: w}
	unix.SetKevent(&p.changes[0], r, unix.EVFILT_READ, unix.EV_ADD|unix.EV_ENABLE)
	if err := p.apply(p.changes[:1]); err != nil {
		unix.Close(r)
		unix.Close(w)
		unix.Close(kq)
		return nil, err
	}
	return p, nil
}

// apply submits changes without collecting events. kevent stops at the
// first change that fails and returns its errno.
func (p *Poller) apply(changes []unix.Kevent_t) error {
	for {
		_, err := unix.Kevent(p.kq, changes, nil, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return os.NewSyscallError("kevent", err)
		}
		return nil
	}
}

// deleteFilter removes one filter of fd. ENOENT (already gone) is not an error.
func (p *Poller) deleteFilter(fd, filter int) error {
	var ch [1]unix.Kevent_t
	unix.SetKevent(&ch[0], fd, filter, unix.EV_DELETE)
	err := p.apply(ch[:])
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}

// set makes the kernel filters of fd match in, given that old is what is
// registered now. A filter that changes between level and OneShot is
// deleted and added again, because EV_ADD on an existing knote does not
// change its EV_DISPATCH flag.
func (p *Poller) set(fd int, old, in Interest) error {
	n := 0
	for _, f := range [2]struct {
		bit    Interest
		filter int
	}{{In, unix.EVFILT_READ}, {Out, unix.EVFILT_WRITE}} {
		had, want := old&f.bit != 0, in&f.bit != 0
		if had && (!want || (old^in)&OneShot != 0) {
			if err := p.deleteFilter(fd, f.filter); err != nil {
				return err
			}
		}
		if want {
			flags := unix.EV_ADD | unix.EV_ENABLE
			if in&OneShot != 0 {
				flags |= unix.EV_DISPATCH
			}
			unix.SetKevent(&p.changes[n], fd, f.filter, flags)
			n++
		}
	}
	if n == 0 {
		return nil
	}
	return p.apply(p.changes[:n])
}

// Add registers fd with token and interest. The caller keeps ownership of
// fd. Unlike epoll, adding an fd that is already registered does not fail:
// it behaves as Mod.
func (p *Poller) Add(fd int, token uint64, in Interest) error {
	if p.closed.Load() {
		return ErrClosed
	}
	if token == WakeToken {
		return ErrWakeToken
	}
	if fd < 0 || fd == p.wakeR {
		return os.NewSyscallError("kevent", unix.EBADF)
	}
	if fd >= len(p.regs) {
		regs := make([]registration, max(fd+1, 2*len(p.regs), 64))
		copy(regs, p.regs)
		p.regs = regs
	}
	r := &p.regs[fd]
	old := r.in
	if err := p.set(fd, old, in); err != nil {
		// Leave nothing half-registered.
		p.deleteFilter(fd, unix.EVFILT_READ)
		p.deleteFilter(fd, unix.EVFILT_WRITE)
		*r = registration{}
		return err
	}
	r.token, r.in = token, in
	if in&(In|Out) == 0 {
		// Nothing to watch: keep the fd known so Mod and Del work as on epoll.
		r.in = in | registeredEmpty
	}
	return nil
}

// registeredEmpty marks a registration with neither In nor Out.
const registeredEmpty Interest = 1 << 7

// Mod replaces the token and interest of a registered fd, re-arming a
// OneShot registration (EV_ADD|EV_ENABLE makes the kernel re-evaluate
// readiness). Modifying an unregistered fd fails with ENOENT.
func (p *Poller) Mod(fd int, token uint64, in Interest) error {
	if p.closed.Load() {
		return ErrClosed
	}
	if token == WakeToken {
		return ErrWakeToken
	}
	if fd < 0 || fd >= len(p.regs) || p.regs[fd].in == 0 {
		return os.NewSyscallError("kevent", unix.ENOENT)
	}
	r := &p.regs[fd]
	if err := p.set(fd, r.in&^registeredEmpty, in); err != nil {
		return err
	}
	r.token, r.in = token, in
	if in&(In|Out) == 0 {
		r.in = in | registeredEmpty
	}
	return nil
}

// Del removes both filters of fd (ENOENT from the kernel is ignored). It
// must be called before the caller closes fd: the kernel drops a closed
// fd's filters by itself, but the Poller's table would go stale. Deleting
// an fd that is not registered fails with ENOENT, as on epoll.
func (p *Poller) Del(fd int) error {
	if p.closed.Load() {
		return ErrClosed
	}
	if fd < 0 || fd >= len(p.regs) || p.regs[fd].in == 0 {
		return os.NewSyscallError("kevent", unix.ENOENT)
	}
	r := &p.regs[fd]
	in := r.in
	*r = registration{}
	var err error
	if in&In != 0 {
		err = p.deleteFilter(fd, unix.EVFILT_READ)
	}
	if in&Out != 0 {
		if err2 := p.deleteFilter(fd, unix.EVFILT_WRITE); err == nil {
			err = err2
		}
	}
	return err
}

// Wait blocks up to timeout (negative: forever; 0: poll) and fills events;
// it returns how many. EINTR is retried with the time that remains. The
// read and write filters of one fd are merged into one Event. A Wake is
// reported as one Event with Token WakeToken, and Wait drains it.
func (p *Poller) Wait(events []Event, timeout time.Duration) (int, error) {
	if p.closed.Load() {
		return 0, ErrClosed
	}
	if len(events) == 0 {
		return 0, ErrNoRoom
	}
	if cap(p.kevbuf) < len(events) {
		p.kevbuf = make([]unix.Kevent_t, len(events))
	}
	buf := p.kevbuf[:len(events)]
	dl := newDeadline(timeout)
	var n int
	for {
		ts := &p.ts
		if r := dl.remaining(); r < 0 {
			ts = nil
		} else {
			p.ts = unix.NsecToTimespec(int64(r))
		}
		var err error
		n, err = unix.Kevent(p.kq, nil, buf, ts)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, os.NewSyscallError("kevent", err)
		}
		if n == 0 && !dl.expired() {
			continue // a wait capped below the timeout
		}
		break
	}
	p.batch++
	if p.batch == 0 { // wrapped: forget every generation
		for i := range p.regs {
			p.regs[i].batch = 0
		}
		p.batch = 1
	}
	out := 0
	woken := false
	for i := range buf[:n] {
		kev := &buf[i]
		fd := int(kev.Ident)
		if fd == p.wakeR {
			if err := p.drainWake(); err != nil {
				return 0, err
			}
			if !woken {
				woken = true
				events[out] = Event{Token: WakeToken}
				out++
			}
			continue
		}
		if fd < 0 || fd >= len(p.regs) || p.regs[fd].in&(In|Out) == 0 {
			continue // not ours any more; cannot happen if Del precedes close
		}
		r := &p.regs[fd]
		var e *Event
		if r.batch == p.batch {
			e = &events[r.slot]
		} else {
			r.batch, r.slot = p.batch, int32(out)
			events[out] = Event{Token: r.token}
			e = &events[out]
			out++
			if r.in&(In|Out|OneShot) == In|Out|OneShot {
				p.disableSibling(fd, int(kev.Filter))
			}
		}
		switch int(kev.Filter) {
		case unix.EVFILT_READ:
			// At EV_EOF the read filter still means read will not block:
			// it returns pending data, then 0.
			e.Readable = true
		case unix.EVFILT_WRITE:
			e.Writable = true
		}
		if kev.Flags&(unix.EV_EOF|unix.EV_ERROR) != 0 {
			e.HangUp = true
		}
	}
	if len(p.disable) > 0 {
		// Best effort: if this fails the sibling may report once more,
		// which is kqueue's own per-filter EV_DISPATCH behaviour.
		p.apply(p.disable)
		p.disable = p.disable[:0]
	}
	return out, nil
}

// disableSibling queues EV_DISABLE for the filter of fd that did not fire,
// so a OneShot registration with both In and Out is disarmed as a whole, as
// EPOLLONESHOT does. If both fire in one Wait, disabling the second (already
// dispatched) filter is harmless.
func (p *Poller) disableSibling(fd, fired int) {
	other := unix.EVFILT_WRITE
	if fired == unix.EVFILT_WRITE {
		other = unix.EVFILT_READ
	}
	var k unix.Kevent_t
	unix.SetKevent(&k, fd, other, unix.EV_DISABLE)
	p.disable = append(p.disable, k)
}

// drainWake empties the pipe, then clears the pending flag. In the other
// order a Wake landing between the two would set the flag and have its byte
// drained here, leaving the flag set with the pipe empty: every later Wake
// would skip its write and never be reported. In this order such a Wake finds
// the flag still set and skips its write, and is reported by this Wait,
// whose caller handles what was posted before it.
func (p *Poller) drainWake() error {
	var b [64]byte
	for {
		_, err := unix.Read(p.wakeR, b[:])
		switch err {
		case nil:
			continue
		case unix.EAGAIN:
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
	if p.wakeW < 0 {
		return ErrClosed
	}
	b := [1]byte{1}
	for {
		_, err := unix.Write(p.wakeW, b[:])
		switch err {
		case nil, unix.EAGAIN: // EAGAIN: pipe full, a wake is pending
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
	w := p.wakeW
	p.wakeW = -1
	p.wakeMu.Unlock()
	// Close is not retried on EINTR: the descriptor is gone either way
	// (see internal/poll/fd_unix.go in the standard library).
	var first error
	for _, fd := range [...]int{w, p.wakeR, p.kq} {
		if err := unix.Close(fd); err != nil && first == nil {
			first = os.NewSyscallError("close", err)
		}
	}
	p.kq, p.wakeR, p.regs = -1, -1, nil
	return first
}

// fds returns the Poller's own descriptors, for tests.
func (p *Poller) fds() []int { return []int{p.kq, p.wakeR, p.wakeW} }
