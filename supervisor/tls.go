package supervisor

import (
	"crypto/rand"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/clienthello"
	"github.com/gatehouse-dev/gatehouse/internal/sysio"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/cluster"
	"github.com/gatehouse-dev/gatehouse/supervisor/secrets"
	"golang.org/x/sys/unix"
)

// TLS (docs/DESIGN.md §9). The supervisor reads every certificate and
// private key before it drops privileges; workers get the chains and sign
// through Sign requests, so no process that parses client bytes ever holds
// a private key or can open its file. The keys and the rules of a
// handshake's one signature are supervisor/secrets'; the loop keeps each
// connection's Grant, the frame table admits a Sign against it (checkSign)
// and the loop answers it.

// openHandshake chooses the certificate of the handshake of c, a new TLS
// connection dispatched to w with m, from the ClientHello among the
// certificates w was started with. The ClientHello is the record readTLS
// has just peeked, when it dispatches c at once (d.hello), or peeked again:
// the dispatcher saw the whole record in the socket, and nothing has read
// it since. The worker presents the certificate (m.Certificate), and c may
// have one signature with its key until its Done (secrets.Grant).
func (d *dispatcher) openHandshake(w *workerProc, c *conn, m *proto.Dispatch) {
	d.c.tlsHandshakes++
	lc := w.keys.Listener(m.GetListenerName())
	if lc == nil {
		return
	}
	var h *clienthello.Hello
	if d.hello == c {
		h, _ = clienthello.Parse(d.peekBuf[:d.helloLen])
	} else if n, err := sysio.Recv(c.fd, d.peekBuf[:recordMax+recordHeader], unix.MSG_PEEK); err == nil {
		h, _ = clienthello.Parse(d.peekBuf[:n])
	}
	i, g := lc.Choose(h)
	m.Certificate = uint32(i)
	c.grant = g
}

// checkSign checks a Sign for connection c, which the frame table found out
// at w in the pool, against c's grant; it returns the violation, or "".
func checkSign(d *dispatcher, w *workerProc, f *proto.Frame, c *conn) string {
	return c.grant.Check(f.GetSign(), c.id)
}

// sign starts an admitted Sign for the handshake of c: its one signature
// is spent, and w's in-flight slot is taken. The key is one of those w was
// started with (a reload may have changed the running ones since). A slow
// one goes to the signing pool (secrets.Pool).
func (d *dispatcher) sign(w *workerProc, id uint64, c *conn, m *proto.Sign) {
	j := w.keys.Job(c.grant, m)
	c.grant = secrets.Grant{}
	d.c.tlsSigns++
	msg := signMsg{slot: w.slot, gen: w.gen, id: id}
	if j.OnLoop() {
		msg.rep = j.Sign()
		d.signed(msg)
		return
	}
	msg.pooled = true
	w.signing++
	d.signPool.Queue(j, msg)
}

// signerLive reports whether the worker a pooled signature is for still
// runs; the pool drops the others' jobs.
func (d *dispatcher) signerLive(m signMsg) bool {
	w := d.workerFor(m.slot, m.gen)
	return w != nil && w.ch != nil
}

// signed answers a Sign request, releasing its slot first, if its worker is
// still the one that asked.
func (d *dispatcher) signed(m signMsg) {
	if m.pooled {
		defer d.signPool.Feed(d.signerLive)
	}
	w := d.workerFor(m.slot, m.gen)
	if w == nil || w.ch == nil {
		return
	}
	if m.pooled {
		w.signing--
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

// ticketRotation is how long a session ticket key encrypts new tickets; it
// is accepted for as long again after.
const ticketRotation = time.Hour

// rotateTickets makes a new session ticket key, keeps the previous one and
// sends both to every worker. Without TLS listeners, or while the keys are
// the cluster's, it does nothing.
func (d *dispatcher) rotateTickets(now time.Time) {
	if len(d.keys.Hello()) == 0 || d.tickets.shared {
		return
	}
	k := make([]byte, 32)
	rand.Read(k)
	d.tickets.keys = append([][]byte{k}, d.tickets.keys[:min(1, len(d.tickets.keys))]...)
	d.tickets.rotated = now
	d.sendTickets()
}

// sharedTickets takes the cluster store's ticket keys, so a session made on
// any instance resumes on this one.
func (d *dispatcher) sharedTickets(m cluster.TicketKeys, now time.Time) {
	d.tickets.keys, d.tickets.shared, d.tickets.rotated = m.Keys, true, now
	if len(d.keys.Hello()) > 0 {
		d.sendTickets()
	}
}

// sendTickets sends the ticket keys to every worker.
func (d *dispatcher) sendTickets() {
	for _, w := range d.workers {
		if w.ch != nil && w.state != workerDead {
			d.send(w, &proto.Frame{Body: &proto.Frame_TicketKeys{TicketKeys: &proto.TicketKeys{Keys: d.tickets.keys}}}, -1)
		}
	}
}

// ticketDeadline is when the ticket keys rotate next (zero: never).
func (d *dispatcher) ticketDeadline() time.Time {
	if d.tickets.rotated.IsZero() || d.tickets.shared {
		return time.Time{}
	}
	return d.tickets.rotated.Add(ticketRotation)
}
