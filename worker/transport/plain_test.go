package transport

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// plainPair returns a plainConn over one end of a non-blocking socket pair,
// as the supervisor's descriptors are, and the other end, blocking.
func plainPair(t *testing.T) (*Plain, int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		t.Fatal(err)
	}
	c := &Plain{fd: fds[0]}
	t.Cleanup(func() {
		c.Close()
		unix.Close(fds[1])
	})
	return c, fds[1]
}

// A round whose input is there and whose response fits never puts the
// connection under the poller.
func TestPlainConnNoWaitNoPoller(t *testing.T) {
	c, peer := plainPair(t)
	if _, err := unix.Write(peer, []byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(time.Minute))
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != "GET / HTTP/1.1\r\n\r\n" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	c.SetWriteDeadline(time.Now().Add(time.Minute))
	if n, err := c.Write([]byte("HTTP/1.1 200 OK\r\n\r\n")); err != nil || n != 19 {
		t.Fatalf("wrote %d, %v", n, err)
	}
	if c.f != nil {
		t.Fatal("a round that never waited put the connection under the poller")
	}
	got := make([]byte, 64)
	if n, _ := unix.Read(peer, got); string(got[:n]) != "HTTP/1.1 200 OK\r\n\r\n" {
		t.Fatalf("peer read %q", got[:n])
	}
}

// A read that must wait waits under the poller, bounded by the deadline set
// before it, and then gets what arrives.
func TestPlainConnReadWaitsWithDeadline(t *testing.T) {
	c, peer := plainPair(t)
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	start := time.Now()
	_, err := c.Read(make([]byte, 8))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read with nothing to read: %v, want the deadline", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the read waited %v past a 50 ms deadline", d)
	}
	if c.f == nil {
		t.Fatal("a read that waited was not under the poller")
	}
	c.SetReadDeadline(time.Now().Add(time.Minute))
	go unix.Write(peer, []byte("late"))
	buf := make([]byte, 8)
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != "late" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
}

// Drained says whether the last read left the socket empty: a read that got
// less than it asked for did, one that filled its buffer may not have, and
// once under the poller nothing is known.
func TestPlainConnDrained(t *testing.T) {
	c, peer := plainPair(t)
	if c.Drained() {
		t.Fatal("drained before any read")
	}
	// The supervisor's read, whose bytes came carried, drained it.
	c.SetDrained()
	if !c.Drained() {
		t.Fatal("not drained after SetDrained")
	}
	unix.Write(peer, []byte("0123456789"))
	if n, err := c.Read(make([]byte, 4)); n != 4 || err != nil {
		t.Fatalf("read %d, %v", n, err)
	}
	if c.Drained() {
		t.Fatal("a read that filled its buffer reported the socket drained")
	}
	if n, err := c.Read(make([]byte, 64)); n != 6 || err != nil {
		t.Fatalf("read %d, %v", n, err)
	}
	if !c.Drained() {
		t.Fatal("a read that got less than it asked for did not report the socket drained")
	}
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	c.Read(make([]byte, 8)) // waits under the poller, to the deadline
	if c.Drained() {
		t.Fatal("drained reported under the poller")
	}
}

// noWait answers ErrWouldBlock instead of waiting, and a closed peer is EOF.
func TestPlainConnNoWaitAndEOF(t *testing.T) {
	c, peer := plainPair(t)
	c.noWait = true
	if _, err := c.Read(make([]byte, 8)); !errors.Is(err, ErrWouldBlock) {
		t.Fatalf("read under noWait: %v, want ErrWouldBlock", err)
	}
	if c.f != nil {
		t.Fatal("a read under noWait put the connection under the poller")
	}
	c.noWait = false
	unix.Shutdown(peer, unix.SHUT_WR)
	if _, err := c.Read(make([]byte, 8)); err != io.EOF {
		t.Fatalf("read after the peer's shutdown: %v, want EOF", err)
	}
}

// A write larger than the socket's buffer sends what fits directly and the
// rest under the poller: all of it when the peer reads, and the write
// deadline when it does not.
func TestPlainConnWriteWaits(t *testing.T) {
	c, peer := plainPair(t)
	big := bytes.Repeat([]byte("x"), 4<<20)
	done := make(chan []byte)
	go func() {
		var got []byte
		buf := make([]byte, 64<<10)
		for len(got) < len(big) {
			n, err := unix.Read(peer, buf)
			if err != nil || n == 0 {
				break
			}
			got = append(got, buf[:n]...)
		}
		done <- got
	}()
	c.SetWriteDeadline(time.Now().Add(time.Minute))
	if n, err := c.Write(big); err != nil || n != len(big) {
		t.Fatalf("wrote %d of %d: %v", n, len(big), err)
	}
	if got := <-done; !bytes.Equal(got, big) {
		t.Fatalf("the peer got %d bytes, not what was written", len(got))
	}
	if c.f == nil {
		t.Fatal("a write that waited was not under the poller")
	}

	c2, _ := plainPair(t)
	c2.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	n, err := c2.Write(big)
	if !errors.Is(err, os.ErrDeadlineExceeded) || n >= len(big) {
		t.Fatalf("write to a peer that never reads: %d bytes, %v; want the deadline", n, err)
	}
}

// writeParts sends two parts larger than the socket's buffer, with and
// without MSG_MORE: what fits at once, the rest under the poller, the peer
// getting both whole and in order; a peer that never reads gets the write
// deadline.
func TestPlainConnWritePartsWaits(t *testing.T) {
	a, b := bytes.Repeat([]byte("a"), 1<<20), bytes.Repeat([]byte("b"), 3<<20)
	want := append(append([]byte(nil), a...), b...)
	for _, more := range []bool{false, true} {
		c, peer := plainPair(t)
		done := make(chan []byte)
		go func() {
			var got []byte
			buf := make([]byte, 64<<10)
			for len(got) < len(want) {
				n, err := unix.Read(peer, buf)
				if err != nil || n == 0 {
					break
				}
				got = append(got, buf[:n]...)
			}
			done <- got
		}()
		c.SetWriteDeadline(time.Now().Add(time.Minute))
		if n, err := c.WriteParts(a, b, more); err != nil || n != len(want) {
			t.Fatalf("more %v: wrote %d of %d: %v", more, n, len(want), err)
		}
		if got := <-done; !bytes.Equal(got, want) {
			t.Fatalf("more %v: the peer got %d bytes, not what was written", more, len(got))
		}
		if c.f == nil {
			t.Fatalf("more %v: a write that waited was not under the poller", more)
		}
	}

	c, _ := plainPair(t)
	c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	n, err := c.WriteParts(a, b, false)
	if !errors.Is(err, os.ErrDeadlineExceeded) || n >= len(want) {
		t.Fatalf("write to a peer that never reads: %d bytes, %v; want the deadline", n, err)
	}
}

// Once under the poller, the connection goes on reading and writing (its
// calls raw, the poller only waiting) as an *os.File would: rounds in both
// directions at once, a deadline already past failing at once even with
// input there, and the peer's end read as EOF.
func TestPlainConnUnderPoller(t *testing.T) {
	c, peer := plainPair(t)
	c.Poll()
	c.SetReadDeadline(time.Now().Add(time.Minute))
	c.SetWriteDeadline(time.Now().Add(time.Minute))
	const rounds = 200
	echoed := make(chan error, 1)
	go func() {
		// The peer writes a round, then reads the answer.
		buf := make([]byte, 64)
		for i := 0; i < rounds; i++ {
			if _, err := unix.Write(peer, []byte("ping")); err != nil {
				echoed <- err
				return
			}
			if n, err := unix.Read(peer, buf); err != nil || string(buf[:n]) != "pong" {
				echoed <- fmt.Errorf("round %d: peer read %q, %v", i, buf[:n], err)
				return
			}
		}
		echoed <- nil
	}()
	buf := make([]byte, 64)
	for i := 0; i < rounds; i++ {
		n, err := c.Read(buf)
		if err != nil || string(buf[:n]) != "ping" {
			t.Fatalf("round %d: read %q, %v", i, buf[:n], err)
		}
		if n, err := c.Write([]byte("pong")); err != nil || n != 4 {
			t.Fatalf("round %d: wrote %d, %v", i, n, err)
		}
	}
	if err := <-echoed; err != nil {
		t.Fatal(err)
	}

	// A read and a write at once, each waiting on its own.
	big := bytes.Repeat([]byte("y"), 2<<20)
	wrote := make(chan error, 1)
	go func() {
		_, err := c.Write(big)
		wrote <- err
	}()
	go func() {
		got := 0
		rb := make([]byte, 64<<10)
		for got < len(big) {
			n, err := unix.Read(peer, rb)
			if err != nil || n == 0 {
				break
			}
			got += n
		}
		unix.Write(peer, []byte("late"))
	}()
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "late" {
		t.Fatalf("read beside a write: %q, %v", buf[:n], err)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("write beside a read: %v", err)
	}

	unix.Write(peer, []byte("there"))
	c.SetReadDeadline(time.Now().Add(-time.Second))
	if _, err := c.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline with input there: %v, want the deadline", err)
	}
	c.SetReadDeadline(time.Now().Add(time.Minute))
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "there" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	unix.Shutdown(peer, unix.SHUT_WR)
	if _, err := c.Read(buf); err != io.EOF {
		t.Fatalf("read after the peer's shutdown: %v, want EOF", err)
	}

	// Reset onto another connection (a server's next dispatch): once
	// under the poller, the raw calls act on the new socket.
	c2, peer2 := plainPair(t)
	c.Close()
	c.Reset(c2.fd)
	c2.fd = -1 // c owns it now
	c.SetReadDeadline(time.Now().Add(time.Minute))
	go func() {
		time.Sleep(10 * time.Millisecond)
		unix.Write(peer2, []byte("next"))
	}()
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "next" || c.f == nil {
		t.Fatalf("read after Reset: %q, %v (under the poller: %v)", buf[:n], err, c.f != nil)
	}
}
