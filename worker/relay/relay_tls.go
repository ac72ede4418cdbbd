package relay

import (
	"crypto/tls"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// TLSSide is c, a TLS connection over the socket sock, as a side of a
// relay.
func TLSSide(c *tls.Conn, sock syscall.Conn) Conn { return &tlsSide{Conn: c, sock: sock} }

// tlsSide is a TLS client connection as a side of a relay: its plaintext is
// read and written through the worker's TLS state (crypto/tls), so that
// direction is copied, never spliced. crypto/tls locks reads and writes
// apart, so both directions run at once; plaintext it already holds (the
// rest of a record) is what the first read returns.
type tlsSide struct {
	*tls.Conn
	sock syscall.Conn // the socket under it, for shutdown
	// mu is held across each write, so that close_notify goes only
	// between whole records, never after part of one a stuck write sent.
	mu sync.Mutex
	// broken: a write failed, so the record stream may end inside a
	// record and no alert can follow it. Guarded by mu.
	broken bool
}

func (t *tlsSide) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, err := t.Conn.Write(p)
	if err != nil {
		t.broken = true
	}
	return n, err
}

// closeWrite passes an end on as TLS does: close_notify, then the
// socket's FIN.
func (t *tlsSide) closeWrite() {
	t.mu.Lock()
	t.closeNotifyLocked()
	t.mu.Unlock()
	shutdown(t.sock, unix.SHUT_WR)
}

// abort sends close_notify unless a write is under way (then the relay is
// failing and the shutdown ends that write), and shuts the socket down
// both ways.
func (t *tlsSide) abort() {
	if t.mu.TryLock() {
		t.closeNotifyLocked()
		t.mu.Unlock()
	}
	shutdown(t.sock, unix.SHUT_RDWR)
}

func (t *tlsSide) closeNotifyLocked() {
	if !t.broken {
		// Bounded by crypto/tls (5 s); every later write fails.
		t.Conn.CloseWrite()
	}
}
