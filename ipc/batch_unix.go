//go:build unix

package ipc

import (
	"github.com/gatehouse-dev/gatehouse/internal/sysio"
	"github.com/gatehouse-dev/gatehouse/proto"
	"golang.org/x/sys/unix"
)

// recvBatch is the most frames one recvmmsg(2) takes, at either end: a
// worker reads the Dispatches the supervisor sent in one batch with one
// call, and the supervisor the Done frames a worker sent meanwhile.
const recvBatch = 8

// recvSlot is a received datagram's room: the largest frame and one spare
// byte, which makes an oversized frame visible, rounded up to whole pages
// so that a slot's unused pages are never touched.
const recvSlot = (MaxFrameSize + 1 + 4095) &^ 4095

// oobSpace is a datagram's room for control data.
var oobSpace = unix.CmsgSpace(oobFDs * 4)

// batch holds the datagrams one recvmmsg(2) took (n of them), handed out
// one a call from next. Memory fresh from the system, as at start, is
// resident only where frames were written: a slot that only ever held
// small frames costs one page. (The same slots mapped with mmap(2) beside
// the runtime's own mappings cost the supervisor about 0.8 MB more after a
// burst of 10 000 connections, for no reason found.)
type batch struct {
	mem  []byte
	oobs []byte
	mm   []sysio.Mmsghdr
	iovs []unix.Iovec
	n    int
	next int
}

// init makes the slots and the messages that point at them.
func (b *batch) init() {
	b.mem = make([]byte, recvBatch*recvSlot)
	b.oobs = make([]byte, recvBatch*oobSpace)
	b.mm = make([]sysio.Mmsghdr, recvBatch)
	b.iovs = make([]unix.Iovec, recvBatch)
	for i := range b.mm {
		iov := &b.iovs[i]
		iov.Base = &b.mem[i*recvSlot]
		iov.SetLen(MaxFrameSize + 1)
		h := &b.mm[i].Hdr
		h.Iov = iov
		h.SetIovlen(1)
		h.Control = &b.oobs[i*oobSpace]
	}
}

// prepare empties the batch and returns its messages, ready for a receive.
func (b *batch) prepare() []sysio.Mmsghdr {
	b.n, b.next = 0, 0
	for i := range b.mm {
		// The kernel overwrites these with what it received.
		b.mm[i].Hdr.SetControllen(oobSpace)
		b.mm[i].Hdr.Flags = 0
	}
	return b.mm
}

// held reports whether datagrams received are not handed out yet.
func (b *batch) held() bool { return b.next < b.n }

// take decodes the next datagram into f and returns its descriptor or -1;
// fds is reused for its descriptors. A datagram of nothing is the peer's
// close (ErrClosed).
func (b *batch) take(fds []int, f *proto.Frame) (int, error) {
	i := b.next
	b.next++
	h := &b.mm[i]
	n, flags := int(h.Len), int(h.Hdr.Flags)
	fds = parseRights(fds, b.oob(i))
	if n == 0 && len(fds) == 0 && flags&unix.MSG_TRUNC == 0 {
		return -1, ErrClosed
	}
	return check(b.mem[i*recvSlot:i*recvSlot+n], n, flags, fds, f)
}

// closeHeld closes the descriptors of the datagrams not handed out and
// empties the batch; fds is reused.
func (b *batch) closeHeld(fds []int) {
	for ; b.next < b.n; b.next++ {
		closeAll(parseRights(fds, b.oob(b.next)))
	}
	b.n, b.next = 0, 0
}

// oob is the control data received into slot i.
func (b *batch) oob(i int) []byte {
	return b.oobs[i*oobSpace : i*oobSpace+int(b.mm[i].Hdr.Controllen)]
}
