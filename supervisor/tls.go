package supervisor

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/rsa"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/gatehouse-dev/gatehouse/proto"
	"golang.org/x/sys/unix"
)

// TLS (docs/DESIGN.md §9). The supervisor reads every certificate and
// private key before it drops privileges; workers get the chains and sign
// through Sign requests, so no process that parses client bytes ever holds
// a private key or can open its file.

// signHashes are the digests a Sign request may name.
var signHashes = map[crypto.Hash]bool{crypto.SHA256: true, crypto.SHA384: true, crypto.SHA512: true}

// validSign checks every field of a Sign request; it returns the violation,
// or "".
func (d *dispatcher) validSign(w *workerProc, m *proto.Sign) string {
	keys := w.keys
	if keys == nil || int64(m.GetKeyId()) >= int64(len(keys.keys)) {
		return fmt.Sprintf("Sign with key %d, which does not exist", m.GetKeyId())
	}
	h := crypto.Hash(m.GetHash())
	if m.GetHash() > 64 || !signHashes[h] {
		return fmt.Sprintf("Sign with hash %d", m.GetHash())
	}
	if len(m.GetDigest()) != h.Size() {
		return fmt.Sprintf("Sign with a %d-byte digest for a %d-byte hash", len(m.GetDigest()), h.Size())
	}
	if _, isRSA := keys.keys[m.GetKeyId()].(*rsa.PrivateKey); m.GetPss() && !isRSA {
		return "Sign asks for PSS with an ECDSA key"
	}
	return ""
}

// signMsg is a finished signature, posted back to the loop.
type signMsg struct {
	slot int
	gen  uint64
	id   uint64
	rep  *proto.SignReply
}

// sign starts a validated Sign request; w's in-flight slot is taken. The
// key is one of those w was started with (a reload may have changed the
// running ones since). An ECDSA signature (tens of microseconds, less than
// the hand-off of the connection it is for) is computed on the loop and
// answered at once: a goroutine and the message back would cost the loop
// more in thread wake-ups than the signature. An RSA signature costs a
// millisecond, so it is computed off the loop and posted back.
func (d *dispatcher) sign(w *workerProc, id uint64, m *proto.Sign) {
	key := w.keys.keys[m.GetKeyId()]
	var opts crypto.SignerOpts = crypto.Hash(m.GetHash())
	if m.GetPss() {
		opts = &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash, Hash: crypto.Hash(m.GetHash())}
	}
	digest := m.GetDigest()
	d.c.tlsSigns++
	msg := signMsg{slot: w.slot, gen: w.gen, id: id}
	if _, ok := key.(*ecdsa.PrivateKey); ok {
		msg.rep = signWith(key, digest, opts)
		d.signed(msg)
		return
	}
	s := d.s
	go func() {
		msg.rep = signWith(key, digest, opts)
		s.post(msg)
	}()
}

// signWith signs digest with key, the error in the reply.
func signWith(key crypto.Signer, digest []byte, opts crypto.SignerOpts) *proto.SignReply {
	rep := &proto.SignReply{}
	sig, err := key.Sign(rand.Reader, digest, opts)
	if err != nil {
		rep.Error = err.Error()
	} else {
		rep.Signature = sig
	}
	return rep
}

// signed answers a Sign request, releasing its slot first, if its worker is
// still the one that asked.
func (d *dispatcher) signed(m signMsg) {
	w := d.workerFor(m.slot, m.gen)
	if w == nil || w.ch == nil {
		return
	}
	if m.rep.GetError() != "" {
		d.c.tlsSignErrors++
	}
	w.slots.Release()
	d.send(w, &proto.Frame{Id: m.id, Body: &proto.Frame_SignReply{SignReply: m.rep}}, -1)
}

// TLS record framing, the only part of TLS the dispatcher looks at.
const (
	recordHeader    = 5
	recordMax       = 1<<14 + 2048 // TLSCiphertext.length bound
	recordHandshake = 0x16
	// The record types a kept-alive connection may send.
	recordChangeCipherSpec = 0x14
	recordApplicationData  = 0x17
)

// readTLS looks at a readable parked connection of a TLS listener: it is
// dispatched once a complete record is buffered (the record header and
// length are peeked, nothing more): a new connection's ClientHello, so the
// handshake starts on a worker that never waits for it, or a kept-alive
// connection's next record, to the worker holding its TLS state. Until then
// the connection stays parked under its timer (first byte, keep-alive), and
// SO_RCVLOWAT keeps it quiet until the record's last byte arrives.
func (d *dispatcher) readTLS(c *conn, now time.Time) {
	n := d.input(c, d.peekBuf[:recordMax+recordHeader], true)
	if n == 0 {
		return
	}
	b := d.peekBuf[:n]
	switch {
	case c.kept != nil && (b[0] < recordChangeCipherSpec || b[0] > recordApplicationData):
		// Between requests any record may come, never anything else.
		d.c.tlsNotTLS++
		d.closeConn(c)
		return
	case c.kept == nil && b[0] != recordHandshake:
		d.notTLS(c, b[0], now)
		return
	}
	need := recordHeader
	if n >= recordHeader {
		length := int(binary.BigEndian.Uint16(b[3:5]))
		if b[1] != 3 || length == 0 || length > recordMax {
			d.c.tlsNotTLS++
			d.closeConn(c)
			return
		}
		need += length
	}
	if n < need {
		if err := unix.SetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_RCVLOWAT, need); err == nil {
			c.lowat = true
		}
		d.arm(c)
		return
	}
	if c.lowat {
		// The worker's poller must see every byte.
		unix.SetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_RCVLOWAT, 1)
		c.lowat = false
	}
	d.leavePark(c)
	d.leaveIncomplete(c)
	d.tryDispatch(c, now)
}

// notTLS closes a connection to a TLS listener that does not start with a
// handshake record: plain HTTP (a request line starts with a letter) gets a
// plaintext 400 that says so first.
func (d *dispatcher) notTLS(c *conn, first byte, now time.Time) {
	if !('A' <= first && first <= 'Z') {
		d.c.tlsNotTLS++
		d.closeConn(c)
		return
	}
	d.c.tlsPlainHTTP++
	d.leavePark(c)
	d.leaveIncomplete(c)
	sendOutput(c.fd, d.canned.r400TLS.at(now))
	unix.Shutdown(c.fd, unix.SHUT_WR)
	d.linger(c, now)
}

// tlsListener reports whether the listener named name terminates TLS.
func (d *dispatcher) tlsListener(name string) bool {
	for _, l := range d.cfg.Listeners {
		if l.Name == name {
			return l.TLS != nil
		}
	}
	return false
}

// ticketRotation is how long a session ticket key encrypts new tickets; it
// is accepted for as long again after.
const ticketRotation = time.Hour

// ticketKeys are the session ticket keys, the current one first, and when
// the current one was made. Owned by the loop.
type ticketKeys struct {
	keys    [][]byte
	rotated time.Time
}

// rotateTickets makes a new session ticket key, keeps the previous one and
// sends both to every worker. Without TLS listeners it does nothing.
func (d *dispatcher) rotateTickets(now time.Time) {
	if len(d.keys.hello()) == 0 {
		return
	}
	k := make([]byte, 32)
	rand.Read(k)
	d.tickets.keys = append([][]byte{k}, d.tickets.keys[:min(1, len(d.tickets.keys))]...)
	d.tickets.rotated = now
	for _, w := range d.workers {
		if w.ch != nil && w.state != workerDead {
			d.send(w, &proto.Frame{Body: &proto.Frame_TicketKeys{TicketKeys: &proto.TicketKeys{Keys: d.tickets.keys}}}, -1)
		}
	}
}

// ticketDeadline is when the ticket keys rotate next (zero: never).
func (d *dispatcher) ticketDeadline() time.Time {
	if d.tickets.rotated.IsZero() {
		return time.Time{}
	}
	return d.tickets.rotated.Add(ticketRotation)
}
