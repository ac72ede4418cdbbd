package transport

import (
	"bytes"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// transportPair returns a tlsTransport over one end of a non-blocking
// socket pair, under the runtime's poller as a TLS connection's is, and the
// other end, blocking.
func transportPair(t *testing.T) (*TLS, int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fds[0]), "conn")
	tt, err := NewTLS(f, fds[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.Close()
		unix.Close(fds[1])
	})
	return tt, fds[1]
}

// record is a TLS application-data record with a body of n bytes of b.
func record(n int, b byte) []byte {
	r := []byte{0x17, 3, 3, byte(n >> 8), byte(n)}
	return append(r, bytes.Repeat([]byte{b}, n)...)
}

func write(t *testing.T, fd int, b []byte) {
	t.Helper()
	if _, err := unix.Write(fd, b); err != nil {
		t.Fatal(err)
	}
}

// TestTLSTransportReadsWholeRecords: a record found whole is read in one
// read, never with any byte of the next; a record still arriving is not
// read at all without waiting (the socket stays at a record boundary for
// the dispatcher), and is read once it is whole.
func TestTLSTransportReadsWholeRecords(t *testing.T) {
	tt, peer := transportPair(t)
	first, second := record(300, 'a'), record(200, 'b')
	write(t, peer, append(append([]byte{}, first...), second[:100]...))

	tt.noWait = true
	buf := make([]byte, 4096)
	n, err := tt.Read(buf)
	if err != nil || !bytes.Equal(buf[:n], first) {
		t.Fatalf("first read: %d bytes, %v; want the whole first record (%d bytes)", n, err, len(first))
	}
	if _, err := tt.Read(buf); !errors.Is(err, ErrNoRecord) {
		t.Fatalf("read of a partial record without waiting: %v, want ErrNoRecord", err)
	}
	peek := make([]byte, 4096)
	if n, _, _, _, _ := unix.Recvmsg(tt.fd, peek, nil, unix.MSG_PEEK|unix.MSG_DONTWAIT); n != 100 || !bytes.Equal(peek[:n], second[:100]) {
		t.Fatalf("the socket holds %d bytes after the first record, want the partial second record's 100", n)
	}
	write(t, peer, second[100:])
	if !tt.Buffered() {
		t.Fatal("a whole record is not buffered")
	}
	n, err = tt.Read(buf)
	if err != nil || !bytes.Equal(buf[:n], second) {
		t.Fatalf("second read: %d bytes, %v; want the whole second record", n, err)
	}
}

// TestTLSTransportChangeCipherSpec: a ChangeCipherSpec is read with the
// whole record after it in one read, and only with a whole one; records
// after those are still read one by one. Drained says whether a read took
// all the socket held.
func TestTLSTransportChangeCipherSpec(t *testing.T) {
	tt, peer := transportPair(t)
	tt.noWait = true
	ccs := []byte{recordChangeCipherSpec, 3, 3, 0, 1, 1}
	fin, req, next := record(53, 'f'), record(67, 'r'), record(40, 'n')
	buf := make([]byte, 4096)

	write(t, peer, append(append([]byte{}, ccs...), fin...))
	n, err := tt.Read(buf)
	if want := append(append([]byte{}, ccs...), fin...); err != nil || !bytes.Equal(buf[:n], want) {
		t.Fatalf("ChangeCipherSpec and a whole record: read %d bytes, %v; want both (%d bytes)", n, err, len(want))
	}
	if !tt.Drained() {
		t.Error("a read that took all the socket held is not Drained")
	}

	// A ChangeCipherSpec before a record still arriving is read alone.
	write(t, peer, append(append([]byte{}, ccs...), req[:20]...))
	if n, err := tt.Read(buf); err != nil || !bytes.Equal(buf[:n], ccs) {
		t.Fatalf("ChangeCipherSpec before a partial record: read %q, %v; want the ChangeCipherSpec alone", buf[:n], err)
	}
	if tt.Drained() {
		t.Error("a read that left part of a record in the socket is Drained")
	}
	write(t, peer, append(req[20:], next...))
	if n, err := tt.Read(buf); err != nil || !bytes.Equal(buf[:n], req) {
		t.Fatalf("record after the ChangeCipherSpec: read %d bytes, %v; want it alone (%d bytes)", n, err, len(req))
	}
	if tt.Drained() {
		t.Error("a read that left a record in the socket is Drained")
	}
	if n, err := tt.Read(buf); err != nil || !bytes.Equal(buf[:n], next) {
		t.Fatalf("last record: read %d bytes, %v; want it (%d bytes)", n, err, len(next))
	}
	if !tt.Drained() {
		t.Error("the last record's read is not Drained")
	}
	if _, err := tt.Read(buf); !errors.Is(err, ErrNoRecord) {
		t.Fatalf("read of an empty socket without waiting: %v, want ErrNoRecord", err)
	}
}

// TestTLSTransportWaitingRead: a read that may wait waits for input under
// the deadline and reads a record that arrives in parts as it comes; an
// oversized header is handed over at once (crypto/tls fails on it).
func TestTLSTransportWaitingRead(t *testing.T) {
	tt, peer := transportPair(t)
	tt.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	buf := make([]byte, 4096)
	if _, err := tt.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read with nothing sent: %v, want the deadline", err)
	}
	tt.SetReadDeadline(time.Now().Add(10 * time.Second))
	rec := record(100, 'c')
	write(t, peer, rec[:3])
	var got []byte
	for i := 0; i < 10 && len(got) < len(rec); i++ {
		n, err := tt.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:n]...)
		if len(got) == 3 {
			write(t, peer, rec[3:])
		}
	}
	if !bytes.Equal(got, rec) {
		t.Fatalf("read %q, want the record", got)
	}
	write(t, peer, []byte{0x17, 3, 3, 0xff, 0xff})
	tt.noWait = true
	if n, err := tt.Read(buf); err != nil || n != recordHeader {
		t.Fatalf("oversized header: %d bytes, %v; want its %d bytes at once", n, err, recordHeader)
	}
}

// TestTLSTransportTimeoutInsideRecord: a read that times out inside a
// record fails with an error crypto/tls takes as temporary (a net.Error
// whose Temporary is true), so the connection stays usable: a relay waits
// again when the other direction moved its deadline. The rest of the
// record is read after it.
func TestTLSTransportTimeoutInsideRecord(t *testing.T) {
	tt, peer := transportPair(t)
	rec := record(100, 'd')
	write(t, peer, rec[:20])
	buf := make([]byte, 4096)
	var got []byte
	for i := 0; i < 10 && len(got) < 20; i++ {
		n, err := tt.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:n]...)
	}
	tt.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err := tt.Read(buf)
	if ne, ok := err.(net.Error); !ok || !ne.Timeout() || !ne.Temporary() {
		t.Fatalf("read inside a record past its deadline: %#v, want a temporary timeout", err)
	}
	tt.SetReadDeadline(time.Now().Add(10 * time.Second))
	write(t, peer, rec[20:])
	for i := 0; i < 10 && len(got) < len(rec); i++ {
		n, err := tt.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:n]...)
	}
	if !bytes.Equal(got, rec) {
		t.Fatalf("read %q, want the record", got)
	}
}

// TestTLSTransportHold: a small write held back leaves with the next in
// one write (one datagram on a SEQPACKET pair); Flush sends one that no
// write followed; a write larger than holdMax is never held.
func TestTLSTransportHold(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	unix.SetNonblock(fds[0], true)
	f := os.NewFile(uintptr(fds[0]), "conn")
	defer f.Close()
	defer unix.Close(fds[1])
	tt, err := NewTLS(f, fds[0])
	if err != nil {
		t.Fatal(err)
	}
	unix.SetNonblock(fds[1], true)
	packets := func() []string {
		var out []string
		buf := make([]byte, 64<<10)
		for range 10 {
			n, err := unix.Read(fds[1], buf)
			if err != nil {
				break
			}
			out = append(out, string(buf[:n]))
		}
		return out
	}

	tt.Hold()
	if n, err := tt.Write([]byte("response")); n != 8 || err != nil {
		t.Fatalf("held write: %d, %v", n, err)
	}
	if got := packets(); len(got) != 0 {
		t.Fatalf("a held write was sent: %q", got)
	}
	if n, err := tt.Write([]byte("alert")); n != 5 || err != nil {
		t.Fatalf("write after the held one: %d, %v; want 5", n, err)
	}
	if got := packets(); len(got) != 1 || got[0] != "responsealert" {
		t.Fatalf("sent %q, want one write of both", got)
	}

	tt.Hold()
	tt.Write([]byte("last"))
	if err := tt.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := packets(); len(got) != 1 || got[0] != "last" {
		t.Fatalf("flushed %q, want the held write", got)
	}
	tt.Write([]byte("plain"))
	if got := packets(); len(got) != 1 || got[0] != "plain" {
		t.Fatalf("after Flush, a write sent %q, want it alone at once", got)
	}

	big := bytes.Repeat([]byte{'b'}, holdMax+1)
	tt.Hold()
	tt.Write(big)
	if got := packets(); len(got) != 1 || len(got[0]) != len(big) {
		t.Fatalf("a write over holdMax was held: %d writes sent", len(got))
	}
	if err := tt.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := packets(); len(got) != 0 {
		t.Fatalf("Flush after an unheld write sent %q", got)
	}
}
