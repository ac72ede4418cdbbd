package worker

import (
	"net/http"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gatehouse-dev/gatehouse/worker/transport"
)

// sendfileChunk is the most one sendfile(2) call sends; the write deadline
// is renewed before each, as deadlineWriter renews it before each write.
// A body under sendfileMin is cheaper copied: it leaves with the header in
// one write.
const (
	sendfileChunk = 4 << 20
	sendfileMin   = 32 << 10
)

// sendFile sends up to n bytes of regular file f from its offset as the
// body, with sendfile(2) from the file to the client socket, under the
// runtime poller and write_timeout. handled is false, with nothing written,
// when the response cannot take it: a TLS connection, a chunked or
// close-delimited body, HEAD, a small body, or a source that is not a
// regular file.
func (r *response) sendFile(f *os.File, n int64) (sent int64, handled bool, err error) {
	pc, ok := r.cs.nc.(*transport.Plain)
	if !ok || r.err != nil || r.req.Method == http.MethodHead || n < sendfileMin {
		return 0, false, nil
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return 0, false, nil
	}
	if !r.wroteHeader {
		r.WriteHeader(http.StatusOK)
	}
	if !r.bodyAllowed() {
		return 0, false, nil
	}
	if !r.headerSent {
		r.sendHeader(false)
	}
	if r.chunked || r.declared < 0 {
		return 0, false, nil
	}
	n = min(n, r.declared-r.written)
	// The header leaves with MSG_MORE: the kernel holds it for the file's
	// first bytes, and they leave in one segment (docs/DESIGN.md §3.5).
	held := n > 0 && r.cs.bw.Buffered() > 0
	r.cs.out.more = held
	r.err = r.cs.bw.Flush()
	r.cs.out.more = false
	if r.err != nil {
		return 0, true, r.err
	}
	defer func() {
		if held && sent == 0 {
			// Nothing followed the header (the file shrank, or an
			// error): setting TCP_NODELAY again sends what MSG_MORE held.
			unix.SetsockoptInt(pc.FD(), unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		}
	}()
	// sendfile waits whenever the socket's buffer is full: under the poller.
	conn := pc.Poll()
	dst, err := conn.SyscallConn()
	if err != nil {
		return 0, false, nil
	}
	src, err := f.SyscallConn()
	if err != nil {
		return 0, false, nil
	}
	timeout := r.cs.w.cfg.Limits.WriteTimeout
	eof := false
	cerr := src.Control(func(sfd uintptr) {
		for sent < n && !eof && r.err == nil {
			conn.SetWriteDeadline(time.Now().Add(timeout))
			werr := dst.Write(func(dfd uintptr) bool {
				m, err := unix.Sendfile(int(dfd), int(sfd), nil, int(min(n-sent, sendfileChunk)))
				if m > 0 {
					sent += int64(m)
				}
				switch {
				case err == unix.EAGAIN || err == unix.EINTR:
					return false // wait until the socket is writable again
				case err != nil:
					r.err = os.NewSyscallError("sendfile", err)
				case m == 0:
					// The file is shorter than declared: finish sees
					// the short body and closes the connection.
					eof = true
				}
				return true
			})
			if werr != nil && r.err == nil {
				r.err = werr
			}
		}
	})
	if cerr != nil && r.err == nil {
		r.err = cerr
	}
	r.written += sent
	return sent, true, r.err
}
