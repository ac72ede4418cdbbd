//go:build !linux && !darwin && !dragonfly && !freebsd && !openbsd

package poll

import "time"

// Poller is unavailable on this system; New returns ErrNotSupported.
type Poller struct{}

// New returns ErrNotSupported: this system has neither epoll nor kqueue
// with EV_DISPATCH in golang.org/x/sys/unix.
func New() (*Poller, error) { return nil, ErrNotSupported }

// Add returns ErrNotSupported.
func (p *Poller) Add(fd int, token uint64, in Interest) error { return ErrNotSupported }

// Mod returns ErrNotSupported.
func (p *Poller) Mod(fd int, token uint64, in Interest) error { return ErrNotSupported }

// Del returns ErrNotSupported.
func (p *Poller) Del(fd int) error { return ErrNotSupported }

// Wait returns ErrNotSupported.
func (p *Poller) Wait(events []Event, timeout time.Duration) (int, error) {
	return 0, ErrNotSupported
}

// Wake returns ErrNotSupported.
func (p *Poller) Wake() error { return ErrNotSupported }

// Close returns ErrNotSupported.
func (p *Poller) Close() error { return ErrNotSupported }
