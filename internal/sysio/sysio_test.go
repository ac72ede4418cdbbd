package sysio

import (
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// blockFor is how long a call that waited would wait: the descriptors'
// SO_RCVTIMEO and SO_SNDTIMEO, so that a wrapper that blocked fails the
// test (by its time) instead of hanging it.
const blockFor = 5 * time.Second

// pair is a connected socket pair whose descriptors are blocking, as a
// worker that cleared O_NONBLOCK leaves a client socket.
func pair(t *testing.T, typ int) [2]int {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, typ, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fds[0]); unix.Close(fds[1]) })
	tv := unix.NsecToTimeval(blockFor.Nanoseconds())
	for _, fd := range fds {
		unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
		unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
	}
	return fds
}

// Every call returns at once on a blocking descriptor: EAGAIN with nothing
// to read, a short write or EAGAIN with a full send buffer.
func TestCallsNeverBlock(t *testing.T) {
	start := time.Now()
	defer func() {
		if d := time.Since(start); d >= blockFor/2 {
			t.Errorf("the calls took %v: one waited", d)
		}
	}()
	s := pair(t, unix.SOCK_STREAM)
	buf := make([]byte, 64)
	if _, err := Recv(s[0], buf, 0); !errors.Is(err, unix.EAGAIN) {
		t.Errorf("Recv on an empty socket: %v, want EAGAIN", err)
	}
	if n, err := Send(s[1], []byte("hello")); n != 5 || err != nil {
		t.Fatalf("Send: %d, %v", n, err)
	}
	if n, err := Recv(s[0], buf, unix.MSG_PEEK); n != 5 || err != nil || string(buf[:n]) != "hello" {
		t.Errorf("Recv with MSG_PEEK: %d %q, %v", n, buf[:n], err)
	}
	if n, err := Recv(s[0], buf, 0); n != 5 || err != nil {
		t.Errorf("Recv after the peek: %d, %v", n, err)
	}
	// Fill s[1]'s send buffer; at most 64 MiB, well past any default.
	big := make([]byte, 1<<20)
	var err error
	for i := 0; i < 64 && err == nil; i++ {
		_, err = Send(s[1], big)
	}
	if !errors.Is(err, unix.EAGAIN) {
		t.Errorf("Send into a full buffer: %v, want EAGAIN", err)
	}

	m := pair(t, unix.SOCK_SEQPACKET)
	oob := make([]byte, 64)
	if _, _, _, err := Recvmsg(m[0], buf, oob, 0); !errors.Is(err, unix.EAGAIN) {
		t.Errorf("Recvmsg on an empty socket: %v, want EAGAIN", err)
	}
	if err := Sendmsg(m[1], []byte("frame"), nil, unix.MSG_NOSIGNAL); err != nil {
		t.Fatal(err)
	}
	if n, oobn, _, err := Recvmsg(m[0], buf, oob, 0); n != 5 || oobn != 0 || err != nil || string(buf[:n]) != "frame" {
		t.Errorf("Recvmsg: %d %q, oob %d, %v", n, buf[:n], oobn, err)
	}
}

// The worker's calls return at once on its non-blocking socket, and a
// Peek leaves what it saw for the next Read.
func TestWorkerCallsNeverBlock(t *testing.T) {
	s := pair(t, unix.SOCK_STREAM)
	for _, fd := range s {
		if err := unix.SetNonblock(fd, true); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 64)
	if _, err := Read(s[0], buf); !errors.Is(err, unix.EAGAIN) {
		t.Errorf("Read on an empty socket: %v, want EAGAIN", err)
	}
	if _, err := Peek(s[0], buf); !errors.Is(err, unix.EAGAIN) {
		t.Errorf("Peek on an empty socket: %v, want EAGAIN", err)
	}
	if n, err := SendParts(s[1], []byte("hel"), []byte("lo"), false); n != 5 || err != nil {
		t.Fatalf("SendParts: %d, %v", n, err)
	}
	if n, err := Write(s[1], []byte("!")); n != 1 || err != nil {
		t.Fatalf("Write: %d, %v", n, err)
	}
	if n, err := Peek(s[0], buf); n != 6 || err != nil || string(buf[:n]) != "hello!" {
		t.Errorf("Peek: %d %q, %v", n, buf[:n], err)
	}
	if n, err := Read(s[0], buf); n != 6 || err != nil || string(buf[:n]) != "hello!" {
		t.Errorf("Read after the peek: %d %q, %v", n, buf[:n], err)
	}
}
