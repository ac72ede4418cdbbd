package transport

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gatehouse-dev/gatehouse/internal/sysio"
)

// TLS is the client connection under crypto/tls (its net.Conn). It reads record
// by record, never past the end of the record crypto/tls asked for: what
// the worker has not read stays in the socket, starting at a record
// boundary, where the dispatcher looks for the next complete record of a
// parked connection. At a boundary it peeks first, and a record found whole
// is read in one read, not a header and a body. A ChangeCipherSpec record
// is read together with the record after it, when that is whole too:
// crypto/tls reads on past a ChangeCipherSpec in the same call, so it never
// holds that record unread, and a TLS 1.3 client's compatibility
// ChangeCipherSpec costs no peek and read of its own.
type TLS struct {
	*os.File
	fd int             // the socket, for peeks
	rc syscall.RawConn // waits for readability under the file's deadlines
	// The conditions of rc.Read's waits, made once: a whole record (a hot
	// wait), and any input (a read that may wait).
	hot, some func(uintptr) bool
	hdr       [recordHeader]byte
	hdrN      int // header bytes read of the current record
	left      int // body bytes of the current record not read yet
	// whole is the size of the next record, header included, when a peek
	// at a record boundary found it complete in the socket (of the next
	// two, after a ChangeCipherSpec); 0 otherwise.
	whole int
	// exact: that peek found nothing after those records. drained: the
	// last read took them, so the socket held nothing more then.
	exact, drained bool
	// noWait: at a record boundary, a read finds the next record complete
	// in the socket or fails with ErrNoRecord instead of waiting.
	noWait bool
	// hold: the next write, if small, is kept in held (Hold).
	hold bool
	held *[]byte
}

// NewTLS returns the transport of socket fd, under the runtime's poller as
// f.
func NewTLS(f *os.File, fd int) (*TLS, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	t := &TLS{File: f, fd: fd, rc: rc}
	t.hot = func(uintptr) bool { return t.Buffered() }
	t.some = func(uintptr) bool { return t.peek() != peekNothing }
	return t, nil
}

// ErrNoRecord ends a read that would wait for a record (SetNoWait). It is temporary,
// so crypto/tls keeps the connection usable: a record that carries no
// plaintext (a TLS 1.3 KeyUpdate, a TLS 1.2 warning alert or an empty
// record) makes crypto/tls read on, and the worker must not wait there for
// a client.
var ErrNoRecord error = noRecordError{}

type noRecordError struct{}

func (noRecordError) Error() string   { return "no complete TLS record buffered" }
func (noRecordError) Timeout() bool   { return true }
func (noRecordError) Temporary() bool { return true }

// recordHeader is a TLS record header's size.
const recordHeader = 5

// recordChangeCipherSpec is a ChangeCipherSpec record's content type.
const recordChangeCipherSpec = 0x14

// recordMax bounds a record's body (TLSCiphertext.length).
const recordMax = 1<<14 + 2048

// boundary reports whether the next byte read begins a record.
func (t *TLS) boundary() bool {
	if t.hdrN == recordHeader && t.left == 0 {
		t.hdrN = 0
	}
	return t.hdrN == 0
}

func (t *TLS) Read(p []byte) (int, error) {
	t.drained = false
	if t.boundary() && t.whole == 0 {
		if t.noWait {
			if t.peek() != peekRecord {
				return 0, ErrNoRecord
			}
		} else if err := t.rc.Read(t.some); err != nil {
			// Waited for input under the deadlines: a part of a record
			// is read as it comes.
			return 0, err
		}
	}
	want := t.left
	switch {
	case t.whole > 0:
		want = t.whole
	case t.hdrN < recordHeader:
		want = recordHeader - t.hdrN
	}
	if len(p) > want {
		p = p[:want]
	}
	n, err := t.read(p)
	if n > 0 {
		t.drained = t.exact && n == t.whole
		t.whole = 0
	}
	for b := p[:n]; len(b) > 0; {
		t.boundary() // a read past a ChangeCipherSpec runs on into the next record
		if t.hdrN < recordHeader {
			c := copy(t.hdr[t.hdrN:], b)
			b = b[c:]
			if t.hdrN += c; t.hdrN == recordHeader {
				t.left = int(binary.BigEndian.Uint16(t.hdr[3:5]))
			}
			continue
		}
		c := min(t.left, len(b))
		t.left -= c
		b = b[c:]
	}
	return n, err
}

// read reads what the socket holds, and waits under the file's deadlines
// only when it holds nothing.
func (t *TLS) read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, err := IgnoringEINTR(func() (int, error) { return sysio.Read(t.fd, p) })
	switch {
	case err == nil && n > 0:
		return n, nil
	case err == nil:
		return 0, io.EOF
	case err != unix.EAGAIN:
		return 0, &os.PathError{Op: "read", Path: "conn", Err: err}
	}
	n, err = t.File.Read(p)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// Bare, it is a temporary net.Error: crypto/tls keeps the part
		// of the record read so far and the connection usable (a relay
		// waits again when the other direction moved its deadline). The
		// *PathError would break the connection for good.
		err = os.ErrDeadlineExceeded
	}
	return n, err
}

// Write writes what the socket takes at once, and waits under the file's
// deadlines only for the rest. Bytes held back (Hold) go first, in the
// same write.
func (t *TLS) Write(p []byte) (int, error) {
	if t.hold {
		t.hold = false
		if len(p) <= holdMax {
			t.held = heldBufs.Get().(*[]byte)
			*t.held = append((*t.held)[:0], p...)
			return len(p), nil
		}
	}
	if t.held == nil {
		return t.write(p)
	}
	b := append(*t.held, p...)
	held := len(b) - len(p)
	*t.held = b
	n, err := t.write(b)
	t.release()
	return max(0, n-held), err
}

func (t *TLS) write(p []byte) (int, error) {
	n, err := sendNow(len(p), func(off int) (int, error) { return sysio.Write(t.fd, p[off:]) })
	if err != nil || n == len(p) {
		return n, err
	}
	m, err := t.File.Write(p[n:])
	return n + m, err
}

// holdMax bounds a write Hold keeps back: far less than a socket's send
// buffer, so it leaves at once with the write after it.
const holdMax = 4 << 10

// heldBufs holds the buffers of held writes.
var heldBufs = sync.Pool{New: func() any {
	b := make([]byte, 0, 2*holdMax)
	return &b
}}

// Hold keeps the next write back, if it is at most holdMax bytes, to go
// out with the write after it (or Flush): a closing connection's last
// response then leaves with its close_notify in one write.
func (t *TLS) Hold() { t.hold = true }

// Flush writes what Hold kept back, if anything, and ends a Hold no write
// used.
func (t *TLS) Flush() error {
	t.hold = false
	if t.held == nil {
		return nil
	}
	_, err := t.write(*t.held)
	t.release()
	return err
}

func (t *TLS) release() {
	if cap(*t.held) <= 2*holdMax {
		heldBufs.Put(t.held)
	}
	t.held = nil
}

// Drained reports whether the last read took every byte the socket held
// (as a peek just before it found), so that the socket held no more input
// then.
func (t *TLS) Drained() bool { return t.drained }

// Buffered reports whether the next record is complete in the socket (its
// size kept in whole), or the socket has an end or an error for a read to
// return. A record header declaring more than a record may hold counts as
// complete, so that crypto/tls reads it and fails at once.
func (t *TLS) Buffered() bool { return t.peek() == peekRecord }

// peekResult is what a peek at a record boundary found.
type peekResult uint8

const (
	peekNothing peekResult = iota // nothing yet
	peekPartial                   // part of the next record
	peekRecord                    // a whole record, an end or an error
)

func (t *TLS) peek() peekResult {
	if t.whole > 0 || !t.boundary() {
		return peekRecord
	}
	buf := recordPeek.Get().(*[]byte)
	defer recordPeek.Put(buf)
	n, err := sysio.Peek(t.fd, *buf)
	switch {
	case err == unix.EAGAIN || err == unix.EINTR:
		return peekNothing
	case err != nil || n == 0:
		return peekRecord
	case n < recordHeader:
		return peekPartial
	}
	b := (*buf)[:n]
	size := int(binary.BigEndian.Uint16(b[3:5]))
	switch {
	case size > recordMax:
		return peekRecord
	case n < recordHeader+size:
		return peekPartial
	}
	t.whole = recordHeader + size
	if b[0] == recordChangeCipherSpec && n >= t.whole+recordHeader {
		if next := recordHeader + int(binary.BigEndian.Uint16(b[t.whole+3:t.whole+5])); next <= recordHeader+recordMax && t.whole+next <= n {
			t.whole += next
		}
	}
	// A full buffer may have left more in the socket.
	t.exact = n == t.whole && n < len(*buf)
	return peekRecord
}

// SetNoWait makes a read at a record boundary find the next record complete
// in the socket or fail with ErrNoRecord, instead of waiting (on), or wait
// again (off).
func (t *TLS) SetNoWait(on bool) { t.noWait = on }

// WaitRecord waits, under the read deadline, until the next record is
// complete in the socket (Buffered).
func (t *TLS) WaitRecord() error { return t.rc.Read(t.hot) }

// The addresses are never used by crypto/tls on a server connection.
func (t *TLS) LocalAddr() net.Addr  { return nil }
func (t *TLS) RemoteAddr() net.Addr { return nil }

// recordPeek holds the buffers of peeks, each as large as a record.
var recordPeek = sync.Pool{New: func() any {
	b := make([]byte, recordHeader+recordMax)
	return &b
}}
