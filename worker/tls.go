package worker

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/clienthello"
	"github.com/gatehouse-dev/gatehouse/internal/headend"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/worker/transport"
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
// connection and the certificate its Dispatch named, the handshake's
// deadline, and the flags Sign sets when it refuses over the cap or its
// reply does not come by the deadline: crypto/tls keeps only the text of
// a signer's error, and the round reports either as its outcome.
type handshakeInfo struct {
	connID   uint64
	cert     int
	deadline time.Time
	refused  atomic.Bool
	timedOut atomic.Bool
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
	hs, _ := ctx.Value(handshakeKey{}).(*handshakeInfo)
	if hs != nil {
		// The handshake's context has no deadline of its own (handshake):
		// the wait for the reply is bounded here.
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, hs.deadline)
		defer cancel()
	}
	r, err := s.w.calls.callNow(ctx, f)
	switch {
	case errors.Is(err, errOverloaded):
		if hs != nil {
			hs.refused.Store(true)
		}
		return nil, errSignOverloaded
	case errors.Is(err, context.DeadlineExceeded) && hs != nil:
		hs.timedOut.Store(true)
		return nil, err
	case err != nil:
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

// handshake runs the server handshake of a dispatched TLS connection.
func (w *Worker) handshake(d *proto.Dispatch, nc *os.File, fd int) (*tls.Conn, proto.Outcome, error) {
	cfg := w.tls[d.GetListenerName()]
	if cfg == nil {
		return nil, proto.Outcome_BAD_REQUEST, fmt.Errorf("no TLS configuration for listener %q", d.GetListenerName())
	}
	tt, err := transport.NewTLS(nc, fd)
	if err != nil {
		return nil, proto.Outcome_BAD_REQUEST, err
	}
	tc := tls.Server(tt, cfg)
	hs := &handshakeInfo{connID: d.GetConnId(), cert: int(d.GetCertificate()), deadline: time.Now().Add(handshakeTimeout)}
	// The deadline bounds every read and write of the handshake, and Sign
	// its wait for the reply. The context carries no deadline: crypto/tls
	// would start a goroutine per handshake to watch it.
	nc.SetDeadline(hs.deadline)
	err = tc.HandshakeContext(context.WithValue(context.Background(), handshakeKey{}, hs))
	nc.SetDeadline(time.Time{})
	switch {
	case err == nil:
		return tc, proto.Outcome_OK, nil
	case hs.refused.Load():
		return nil, proto.Outcome_OVERLOADED, err
	case hs.timedOut.Load() || isTimeout(err):
		return nil, proto.Outcome_TIMEOUT, err
	case errors.Is(err, io.EOF):
		return nil, proto.Outcome_PEER_CLOSED, err
	}
	return nil, proto.Outcome_BAD_REQUEST, err
}

// setTicketKeys gives every TLS listener the supervisor's session ticket
// keys, the current one first, so a ticket issued by any worker resumes on
// this one without a signature.
// Before Hello (s nil) they are ignored.
func (s *setup) setTicketKeys(keys [][]byte) error {
	if s == nil || len(s.tls) == 0 {
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
	for _, cfg := range s.tls {
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
	cs.tt.SetNoWait(true)
	defer cs.tt.SetNoWait(false)
	for !headend.Decided(cs.pendingInput()) {
		// With plaintext perhaps held inside crypto/tls, its read finds it,
		// or at a record boundary a complete record or ErrNoRecord.
		if !cs.in.full && !cs.tt.Buffered() {
			return false
		}
		cs.in.head(time.Now())
		if _, err := cs.br.Peek(min(cs.pending()+1, cs.br.Size())); err != nil {
			return !errors.Is(err, transport.ErrNoRecord)
		}
	}
	return true
}

// tlsPull moves into the reader the plaintext crypto/tls may still hold
// after a read that filled its buffer (a full-size record read into a
// partly filled reader), so that pending() counts it: a connection whose
// next request is already decrypted must not wait for the socket.
func (cs *connServer) tlsPull() {
	if !cs.tls || !cs.in.full || cs.br.Buffered() == cs.br.Size() {
		return
	}
	cs.tt.SetNoWait(true)
	cs.br.Peek(cs.br.Buffered() + 1)
	cs.tt.SetNoWait(false)
}
