// Package poll is the dispatcher's readiness notification: epoll on Linux,
// kqueue on the BSDs and macOS. A Poller is used by one goroutine, except Wake.
//
// The package is a thin layer over raw, non-blocking descriptors. It does not
// read, write, accept or close the descriptors it watches, and it never takes
// ownership of them: the caller keeps each fd open while it is registered and
// calls Del before closing it. A Poller owns only its own descriptors (the
// epoll or kqueue fd and the wake-up eventfd or pipe), all close-on-exec, and
// Close releases them.
//
// Non-goals: this is not a general event loop (no timers, no callbacks, no
// edge-triggered mode) and it is not safe for use by several goroutines,
// except Wake.
//
// # Semantics common to both back ends
//
//   - Registrations are level-triggered unless OneShot is set.
//   - OneShot disarms the whole registration (both directions) after it
//     reports one Event; Mod re-arms it and the kernel re-evaluates readiness,
//     so a condition that still holds is reported again.
//   - Wait reports at most one Event per descriptor per call, with Readable
//     and Writable merged.
//   - At end of stream (the peer closed or shut down its write side) an In
//     registration of a socket reports Readable and HangUp together, whether
//     or not data is still pending: read until it returns 0 to tell the two
//     apart. The read end of a pipe whose writer closed reports HangUp, and
//     Readable too while data is pending (on kqueue always, on epoll only
//     with data). Treat HangUp as "read until 0 or an error".
//   - Wait retries EINTR itself with the time that remains; it never returns
//     EINTR and never returns early with 0 events unless the timeout expired
//     or the timeout was 0.
//   - WakeToken is reserved: Add and Mod reject it with ErrWakeToken.
package poll

import (
	"errors"
	"time"
)

// Interest is the set of readiness conditions a registration asks for.
type Interest uint8

const (
	In      Interest = 1 << iota // readable
	Out                          // writable
	OneShot                      // disarm after one event until Mod re-arms it
)

// Event is one readiness report. Token is the caller's 64-bit value given at Add/Mod.
type Event struct {
	Token    uint64
	Readable bool
	Writable bool
	HangUp   bool // peer closed its write side, hung up, or error (EPOLLRDHUP|EPOLLHUP|EPOLLERR; kqueue EV_EOF/EV_ERROR)
}

// WakeToken is the Token of the Event Wait reports after Wake. That Event has
// Readable, Writable and HangUp all false.
const WakeToken = ^uint64(0)

var (
	// ErrClosed is returned by every method called after Close.
	ErrClosed = errors.New("poll: poller closed")
	// ErrWakeToken is returned by Add and Mod when the token is WakeToken.
	ErrWakeToken = errors.New("poll: token is reserved for Wake")
	// ErrNoRoom is returned by Wait when events is empty.
	ErrNoRoom = errors.New("poll: Wait needs a non-empty events slice")
	// ErrNotSupported is returned by New on systems with neither epoll nor kqueue.
	ErrNotSupported = errors.New("poll: not supported on this system")
)

// Limits on one kernel wait, so the timeout fits the system call's argument.
// A longer timeout is served by several waits.
const (
	maxWaitMillis = 1<<31 - 1           // epoll_wait: int milliseconds
	maxWaitSpan   = 24 * 24 * time.Hour // kevent: well inside every BSD's timespec limits
)

// deadline tracks the time a Wait may still block across EINTR retries.
type deadline struct {
	forever bool
	end     time.Time // monotonic; meaningful unless forever
}

func newDeadline(timeout time.Duration) deadline {
	if timeout < 0 {
		return deadline{forever: true}
	}
	return deadline{end: time.Now().Add(timeout)}
}

// remaining returns how long the next kernel wait may block: negative for
// forever, otherwise at most maxWaitSpan and never negative.
func (d deadline) remaining() time.Duration {
	if d.forever {
		return -1
	}
	r := time.Until(d.end)
	if r < 0 {
		return 0
	}
	return min(r, maxWaitSpan)
}

// expired reports whether the deadline has passed (never, if forever).
func (d deadline) expired() bool {
	return !d.forever && !time.Now().Before(d.end)
}
