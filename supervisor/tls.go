package supervisor

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/clienthello"
	"github.com/gatehouse-dev/gatehouse/proto"
	"golang.org/x/sys/unix"
)

// TLS (docs/DESIGN.md §9). The supervisor reads every certificate and
// private key before it drops privileges; workers get the chains and sign
// through Sign requests, so no process that parses client bytes ever holds
// a private key or can open its file.

// A handshake's signature (issue 27: a worker is an adversary). A Sign is
// admitted only for a TLS connection on its first dispatch, at the worker
// that holds it, before its Done, once, with the key of the certificate
// the supervisor chose for it from the ClientHello (openHandshake), and a
// hash and scheme the handshake could negotiate with that key: a
// compromised worker gets at most one signature per TLS connection a client
// opened, with the key that connection's handshake presents.

// signSet is a set of the (hash, scheme) pairs a handshake may sign with:
// bit signHashes index, plus signPSS for RSASSA-PSS. Zero: no Sign is
// admitted (no handshake, or its signature made).
type signSet uint8

// signHashes are the digests a Sign may name, by their bit in a signSet.
var signHashes = [...]crypto.Hash{crypto.SHA256, crypto.SHA384, crypto.SHA512}

const signPSS = 3 // bit offset of the PSS pairs

// signBit is the bit of a Sign's hash and scheme, or 0 for a hash no
// handshake signs with.
func signBit(hash uint32, pss bool) signSet {
	for i, h := range signHashes {
		if uint32(h) == hash {
			if pss {
				i += signPSS
			}
			return 1 << i
		}
	}
	return 0
}

// The signature schemes of RSA and ECDSA keys (RFC 8446 §4.2.3), by the bit
// of their hash and scheme. An ECDSA scheme names its curve for TLS 1.3
// only; TLS 1.2 signs any curve with any of the three hashes.
var (
	rsaSchemes = [...]tls.SignatureScheme{
		tls.PKCS1WithSHA256, tls.PKCS1WithSHA384, tls.PKCS1WithSHA512,
		tls.PSSWithSHA256, tls.PSSWithSHA384, tls.PSSWithSHA512,
	}
	ecdsaSchemes = [...]tls.SignatureScheme{
		tls.ECDSAWithP256AndSHA256, tls.ECDSAWithP384AndSHA384, tls.ECDSAWithP521AndSHA512,
	}
	ecdsaCurves = [...]elliptic.Curve{elliptic.P256(), elliptic.P384(), elliptic.P521()}
)

// handshakeSigns is what a handshake with ClientHello h (nil: one the
// supervisor could not read) may sign with pub: the schemes of pub's type
// that the client offers, those of the TLS version it negotiates with the
// workers (TLS 1.3: PSS for RSA, the curve's own hash for ECDSA). Without h,
// every scheme of pub's type, so that no client's ClientHello can make an
// honest worker's Sign a violation. Ed25519 and other keys: none (workers
// refuse their certificates).
func handshakeSigns(pub crypto.PublicKey, h *clienthello.Hello) signSet {
	var set signSet
	tls13 := h != nil && h.TLS13()
	switch pub := pub.(type) {
	case *rsa.PublicKey:
		for i, sch := range rsaSchemes {
			if h == nil || h.Offers(sch) && (!tls13 || i >= signPSS) {
				set |= 1 << i
			}
		}
	case *ecdsa.PublicKey:
		for i, sch := range ecdsaSchemes {
			if h == nil || h.Offers(sch) && (!tls13 || pub.Curve == ecdsaCurves[i]) {
				set |= 1 << i
			}
		}
	}
	return set
}

// openHandshake chooses the certificate of the handshake of c, a new TLS
// connection dispatched to w with m: as crypto/tls would from the
// ClientHello, peeked again (the dispatcher saw the whole record in the
// socket, and nothing has read it since), among the certificates w was
// started with. The worker presents it (m.Certificate), and c may have one
// signature with its key until its Done.
func (d *dispatcher) openHandshake(w *workerProc, c *conn, m *proto.Dispatch) {
	d.c.tlsHandshakes++
	lc := w.keys.listener(m.GetListenerName())
	if lc == nil {
		return
	}
	var h *clienthello.Hello
	if n, err := recvInput(c.fd, d.peekBuf[:recordMax+recordHeader], unix.MSG_PEEK); err == nil {
		h, _ = clienthello.Parse(d.peekBuf[:n])
	}
	i := clienthello.Pick(h, lc.picks)
	m.Certificate = uint32(i)
	c.signKey = lc.ids[i]
	c.signs = handshakeSigns(w.keys.keys[c.signKey].Public(), h)
}

// checkSign checks a Sign for connection c, which the frame table found out
// at w in the pool; it returns the violation, or "".
func checkSign(d *dispatcher, w *workerProc, f *proto.Frame, c *conn) string {
	m := f.GetSign()
	bit := signBit(m.GetHash(), m.GetPss())
	switch {
	case c.signs == 0:
		return fmt.Sprintf("Sign for connection %d, which is in no handshake or has had its signature", c.id)
	case m.GetKeyId() != uint32(c.signKey):
		return fmt.Sprintf("Sign with key %d for connection %d, whose handshake presents key %d", m.GetKeyId(), c.id, c.signKey)
	case c.signs&bit == 0:
		return fmt.Sprintf("Sign with hash %d (PSS %v), which the handshake of connection %d cannot use", m.GetHash(), m.GetPss(), c.id)
	case len(m.GetDigest()) != crypto.Hash(m.GetHash()).Size():
		return fmt.Sprintf("Sign with a %d-byte digest for a %d-byte hash", len(m.GetDigest()), crypto.Hash(m.GetHash()).Size())
	}
	return ""
}

// signMsg is a finished signature, posted back to the loop.
type signMsg struct {
	slot int
	gen  uint64
	id   uint64
	rep  *proto.SignReply
	// pooled: computed by the signing pool.
	pooled bool
}

// signJob is a signature for the signing pool.
type signJob struct {
	key    crypto.Signer
	digest []byte
	opts   crypto.SignerOpts
	msg    signMsg
}

// signPool computes off the loop the signatures slower than P-256's
// (P-384 0.4 ms, P-521 1.2 ms, RSA 2048 1 ms and more): a signature on the
// loop delays every connection, and 64 Sign frames in one wake-up would
// stall it for tens of milliseconds. Its goroutines, one per CPU, post
// each signature back. The loop never blocks on it: a job the channel has
// no room for waits in backlog, loop-owned, bounded by the workers'
// in-flight slots (each job holds one).
type signPool struct {
	jobs    chan signJob
	backlog []signJob
}

// signPoolQueue is the jobs channel's room.
const signPoolQueue = 64

// onLoop reports whether key signs on the loop: P-256, in about 20 µs,
// less than the hand-off of the connection it is for; a goroutine and the
// message back would cost the loop more than the signature.
func onLoop(key crypto.Signer) bool {
	k, ok := key.(*ecdsa.PrivateKey)
	return ok && k.Curve == elliptic.P256()
}

// sign starts an admitted Sign for the handshake of c: its one signature
// is spent, and w's in-flight slot is taken. The key is one of those w was
// started with (a reload may have changed the running ones since).
func (d *dispatcher) sign(w *workerProc, id uint64, c *conn, m *proto.Sign) {
	c.signs = 0
	key := w.keys.keys[c.signKey]
	var opts crypto.SignerOpts = crypto.Hash(m.GetHash())
	if m.GetPss() {
		opts = &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash, Hash: crypto.Hash(m.GetHash())}
	}
	d.c.tlsSigns++
	msg := signMsg{slot: w.slot, gen: w.gen, id: id}
	if onLoop(key) {
		msg.rep = signWith(key, m.GetDigest(), opts)
		d.signed(msg)
		return
	}
	msg.pooled = true
	w.signing++
	p := &d.signPool
	if p.jobs == nil {
		p.jobs = make(chan signJob, signPoolQueue)
		s := d.s
		for range runtime.GOMAXPROCS(0) {
			go func() {
				for j := range p.jobs {
					j.msg.rep = signWith(j.key, j.digest, j.opts)
					s.post(j.msg)
				}
			}()
		}
	}
	j := signJob{key: key, digest: slices.Clone(m.GetDigest()), opts: opts, msg: msg}
	if len(p.backlog) > 0 {
		p.backlog = append(p.backlog, j)
		return
	}
	select {
	case p.jobs <- j:
	default:
		p.backlog = append(p.backlog, j)
	}
}

// feedSignPool moves the backlog into the pool's channel while it has
// room, dropping the jobs of workers gone meanwhile.
func (d *dispatcher) feedSignPool() {
	p := &d.signPool
	for len(p.backlog) > 0 {
		j := p.backlog[0]
		if w := d.workerFor(j.msg.slot, j.msg.gen); w == nil || w.ch == nil {
			p.backlog = p.backlog[1:]
			continue
		}
		select {
		case p.jobs <- j:
			p.backlog = p.backlog[1:]
		default:
			return
		}
	}
	p.backlog = nil
}

// stopSignPool ends the pool's goroutines once the loop has stopped.
func (d *dispatcher) stopSignPool() {
	if d.signPool.jobs != nil {
		close(d.signPool.jobs)
	}
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
	if m.pooled {
		defer d.feedSignPool()
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
