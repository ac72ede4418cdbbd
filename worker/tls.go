package worker

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/clienthello"
	"github.com/gatehouse-dev/gatehouse/internal/headend"
	"github.com/gatehouse-dev/gatehouse/proto"
	"golang.org/x/sys/unix"
)

// TLS on the worker (docs/DESIGN.md §9): the handshake runs here, once the
// supervisor has seen a complete ClientHello record, bounded by
// handshakeTimeout. The certificates' private keys stay in the supervisor:
// each certificate carries a remoteSigner whose Sign is a Sign request.

// handshakeTimeout bounds a TLS handshake from its dispatch.
const handshakeTimeout = 15 * time.Second

// tlsConfigs builds one tls.Config per TLS listener from Hello's
// certificates, in order: a listener's first certificate is its default.
func (w *Worker) tlsConfigs(certs []*proto.TLSCertificate) (map[string]*tls.Config, error) {
	byListener := map[string][]*tls.Certificate{}
	var order []string
	for _, c := range certs {
		if len(c.GetChain()) == 0 {
			return nil, fmt.Errorf("certificate %q of listener %q has no chain", c.GetName(), c.GetListener())
		}
		leaf, err := x509.ParseCertificate(c.GetChain()[0])
		if err != nil {
			return nil, fmt.Errorf("certificate %q of listener %q: %w", c.GetName(), c.GetListener(), err)
		}
		switch leaf.PublicKey.(type) {
		case *ecdsa.PublicKey, *rsa.PublicKey:
		default:
			return nil, fmt.Errorf("certificate %q of listener %q has a %T key", c.GetName(), c.GetListener(), leaf.PublicKey)
		}
		if _, ok := byListener[c.GetListener()]; !ok {
			order = append(order, c.GetListener())
		}
		byListener[c.GetListener()] = append(byListener[c.GetListener()], &tls.Certificate{
			Certificate: c.GetChain(),
			Leaf:        leaf,
			PrivateKey:  &remoteSigner{w: w, id: c.GetKeyId(), pub: leaf.PublicKey},
		})
	}
	out := make(map[string]*tls.Config, len(order))
	for _, name := range order {
		list := byListener[name]
		out[name] = &tls.Config{
			MinVersion:   tls.VersionTLS12,
			CipherSuites: clienthello.CipherSuites,
			NextProtos:   []string{"http/1.1"},
			GetCertificate: func(hi *tls.ClientHelloInfo) (*tls.Certificate, error) {
				return chosenCertificate(list, hi)
			},
		}
	}
	return out, nil
}

// chosenCertificate returns the certificate the supervisor chose for the
// handshake (Dispatch.certificate, as crypto/tls would choose from the
// ClientHello; the supervisor signs with no other key for it), with a
// signer bound to this handshake: its deadline and its connection. A
// handshake without the dispatch's information (a test's) presents the
// default, the first.
func chosenCertificate(list []*tls.Certificate, hi *tls.ClientHelloInfo) (*tls.Certificate, error) {
	hs, _ := hi.Context().Value(handshakeKey{}).(*handshakeInfo)
	i := 0
	if hs != nil {
		i = hs.cert
	}
	if i >= len(list) {
		return nil, fmt.Errorf("the supervisor chose certificate %d of %d", i, len(list))
	}
	c := *list[i]
	s := *c.PrivateKey.(*remoteSigner)
	s.ctx = hi.Context()
	if hs != nil {
		s.connID = hs.connID
	}
	c.PrivateKey = &s
	return &c, nil
}

// errSignOverloaded fails a handshake at once when the channel's in-flight
// cap is reached, here or at the supervisor.
var errSignOverloaded = errors.New("worker: signing refused over the in-flight cap")

// handshakeInfo rides in a handshake's context (handshakeKey): the
// connection and the certificate its Dispatch named, and the flag Sign
// sets when it refuses over the cap: crypto/tls keeps only the text of a
// signer's error, and the round reports the refusal as its outcome.
type handshakeInfo struct {
	connID  uint64
	cert    int
	refused atomic.Bool
}

type handshakeKey struct{}

// remoteSigner is a certificate's private key as the worker sees it: the
// public half, and a Sign that asks the supervisor.
type remoteSigner struct {
	w      *Worker
	id     uint32
	pub    crypto.PublicKey
	ctx    context.Context // the handshake's
	connID uint64          // the handshake's connection
}

// Public returns the certificate's public key.
func (s *remoteSigner) Public() crypto.PublicKey { return s.pub }

// Sign asks the supervisor to sign digest with the key it holds. It never
// waits for an in-flight slot: over the cap the handshake fails at once.
func (s *remoteSigner) Sign(_ io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	ctx := s.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	_, pss := opts.(*rsa.PSSOptions)
	f := &proto.Frame{Body: &proto.Frame_Sign{Sign: &proto.Sign{
		KeyId:  s.id,
		Hash:   uint32(opts.HashFunc()),
		Digest: digest,
		Pss:    pss,
		ConnId: s.connID,
	}}}
	r, err := s.w.calls.callNow(ctx, f)
	if errors.Is(err, errOverloaded) {
		if hs, ok := ctx.Value(handshakeKey{}).(*handshakeInfo); ok {
			hs.refused.Store(true)
		}
		return nil, errSignOverloaded
	}
	if err != nil {
		return nil, err
	}
	rep := r.f.GetSignReply()
	switch {
	case rep == nil:
		return nil, fmt.Errorf("worker: Sign answered by %T", r.f.Body)
	case rep.GetError() != "":
		return nil, fmt.Errorf("worker: supervisor signing: %s", rep.GetError())
	}
	return rep.GetSignature(), nil
}

// tlsTransport is the client connection under crypto/tls. It reads record
// by record, never past the end of the record crypto/tls asked for: what
// the worker has not read stays in the socket, starting at a record
// boundary, where the dispatcher looks for the next complete record of a
// parked connection. At a boundary it peeks first, and a record found whole
// is read in one read, not a header and a body.
type tlsTransport struct {
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
	// at a record boundary found it complete in the socket; 0 otherwise.
	whole int
	// noWait: at a record boundary, a read finds the next record complete
	// in the socket or fails with errNoRecord instead of waiting.
	noWait bool
}

func newTLSTransport(f *os.File, fd int) (*tlsTransport, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	t := &tlsTransport{File: f, fd: fd, rc: rc}
	t.hot = func(uintptr) bool { return t.buffered() }
	t.some = func(uintptr) bool { return t.peek() != peekNothing }
	return t, nil
}

// errNoRecord ends a read that would wait for a record. It is temporary,
// so crypto/tls keeps the connection usable: a record that carries no
// plaintext (a TLS 1.3 KeyUpdate, a TLS 1.2 warning alert or an empty
// record) makes crypto/tls read on, and the worker must not wait there for
// a client.
var errNoRecord error = noRecordError{}

type noRecordError struct{}

func (noRecordError) Error() string   { return "no complete TLS record buffered" }
func (noRecordError) Timeout() bool   { return true }
func (noRecordError) Temporary() bool { return true }

// recordHeader is a TLS record header's size.
const recordHeader = 5

// recordMax bounds a record's body (TLSCiphertext.length).
const recordMax = 1<<14 + 2048

func (t *tlsTransport) boundary() bool {
	if t.hdrN == recordHeader && t.left == 0 {
		t.hdrN = 0
	}
	return t.hdrN == 0
}

func (t *tlsTransport) Read(p []byte) (int, error) {
	if t.boundary() && t.whole == 0 {
		if t.noWait {
			if t.peek() != peekRecord {
				return 0, errNoRecord
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
		t.whole = 0
	}
	for b := p[:n]; len(b) > 0; {
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
func (t *tlsTransport) read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, err := ignoringEINTR(func() (int, error) { return readNB(t.fd, p) })
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
// deadlines only for the rest.
func (t *tlsTransport) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		m, err := ignoringEINTR(func() (int, error) { return writeNB(t.fd, p[n:]) })
		if err == unix.EAGAIN {
			break
		}
		if err != nil {
			return n, &os.PathError{Op: "write", Path: "conn", Err: err}
		}
		n += m
	}
	if n == len(p) {
		return n, nil
	}
	m, err := t.File.Write(p[n:])
	return n + m, err
}

// buffered reports whether the next record is complete in the socket (its
// size kept in whole), or the socket has an end or an error for a read to
// return. A record header declaring more than a record may hold counts as
// complete, so that crypto/tls reads it and fails at once.
func (t *tlsTransport) buffered() bool { return t.peek() == peekRecord }

// peekResult is what a peek at a record boundary found.
type peekResult uint8

const (
	peekNothing peekResult = iota // nothing yet
	peekPartial                   // part of the next record
	peekRecord                    // a whole record, an end or an error
)

func (t *tlsTransport) peek() peekResult {
	if t.whole > 0 || !t.boundary() {
		return peekRecord
	}
	buf := recordPeek.Get().(*[]byte)
	defer recordPeek.Put(buf)
	n, err := peekNB(t.fd, *buf)
	switch {
	case err == unix.EAGAIN || err == unix.EINTR:
		return peekNothing
	case err != nil || n == 0:
		return peekRecord
	case n < recordHeader:
		return peekPartial
	}
	size := int(binary.BigEndian.Uint16((*buf)[3:5]))
	switch {
	case size > recordMax:
		return peekRecord
	case n >= recordHeader+size:
		t.whole = recordHeader + size
		return peekRecord
	}
	return peekPartial
}

// The addresses are never used by crypto/tls on a server connection.
func (t *tlsTransport) LocalAddr() net.Addr  { return nil }
func (t *tlsTransport) RemoteAddr() net.Addr { return nil }

// handshake runs the server handshake of a dispatched TLS connection.
func (w *Worker) handshake(d *proto.Dispatch, nc *os.File, fd int) (*tls.Conn, proto.Outcome, error) {
	cfg := w.tls[d.GetListenerName()]
	if cfg == nil {
		return nil, proto.Outcome_BAD_REQUEST, fmt.Errorf("no TLS configuration for listener %q", d.GetListenerName())
	}
	tt, err := newTLSTransport(nc, fd)
	if err != nil {
		return nil, proto.Outcome_BAD_REQUEST, err
	}
	tc := tls.Server(tt, cfg)
	hs := &handshakeInfo{connID: d.GetConnId(), cert: int(d.GetCertificate())}
	ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), handshakeKey{}, hs), handshakeTimeout)
	defer cancel()
	nc.SetDeadline(time.Now().Add(handshakeTimeout))
	err = tc.HandshakeContext(ctx)
	nc.SetDeadline(time.Time{})
	switch {
	case err == nil:
		return tc, proto.Outcome_OK, nil
	case hs.refused.Load():
		return nil, proto.Outcome_OVERLOADED, err
	case isTimeout(err) || errors.Is(err, context.DeadlineExceeded):
		return nil, proto.Outcome_TIMEOUT, err
	case errors.Is(err, io.EOF):
		return nil, proto.Outcome_PEER_CLOSED, err
	}
	return nil, proto.Outcome_BAD_REQUEST, err
}

// setTicketKeys gives every TLS listener the supervisor's session ticket
// keys, the current one first, so a ticket issued by any worker resumes on
// this one without a signature.
func (w *Worker) setTicketKeys(keys [][]byte) error {
	if len(w.tls) == 0 {
		return nil
	}
	if len(keys) == 0 || len(keys) > 2 {
		return fmt.Errorf("%d session ticket keys", len(keys))
	}
	ks := make([][32]byte, len(keys))
	for i, k := range keys {
		if len(k) != 32 {
			return fmt.Errorf("a session ticket key of %d bytes", len(k))
		}
		copy(ks[i][:], k)
	}
	for _, cfg := range w.tls {
		cfg.SetSessionTicketKeys(ks)
	}
	return nil
}

// tlsHeadReady decrypts the plaintext crypto/tls still holds and the
// complete records already in the socket until the plaintext held holds a
// decided head. It reports false when they are used up first, also inside
// crypto/tls after a record without plaintext: the connection goes back to
// the supervisor, which dispatches it again when its next record is
// complete. A record that does not decrypt is left to the round, which
// fails on it.
func (cs *connServer) tlsHeadReady() bool {
	cs.tt.noWait = true
	defer func() { cs.tt.noWait = false }()
	for !headend.Decided(cs.pendingInput()) {
		// With plaintext perhaps held inside crypto/tls, its read finds it,
		// or at a record boundary a complete record or errNoRecord.
		if !cs.in.full && !cs.tt.buffered() {
			return false
		}
		cs.in.head(time.Now())
		if _, err := cs.br.Peek(min(cs.pending()+1, cs.br.Size())); err != nil {
			return !errors.Is(err, errNoRecord)
		}
	}
	return true
}

// recordPeek holds the buffers of peeks, each as large as a record.
var recordPeek = sync.Pool{New: func() any {
	b := make([]byte, recordHeader+recordMax)
	return &b
}}

// tlsPull moves into the reader the plaintext crypto/tls may still hold
// after a read that filled its buffer (a full-size record read into a
// partly filled reader), so that pending() counts it: a connection whose
// next request is already decrypted must not wait for the socket.
func (cs *connServer) tlsPull() {
	if !cs.tls || !cs.in.full || cs.br.Buffered() == cs.br.Size() {
		return
	}
	cs.tt.noWait = true
	cs.br.Peek(cs.br.Buffered() + 1)
	cs.tt.noWait = false
}
