package supervisor

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testcert"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/supervisor/view"
)

// tlsHarness is a loop whose TLS listener "https" holds the certificates
// of ec.test (P-256, key 0, the default), rsa.test (RSA, key 1) and
// p384.test (P-384, key 2).
type tlsHarness struct {
	*loopHarness
	keys []crypto.Signer
}

func tlsLoop(t *testing.T, workers int) *tlsHarness {
	t.Helper()
	dir := t.TempDir()
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	keys := []crypto.Signer{testcert.WritePair(t, dir, "ec.test", false), testcert.WritePair(t, dir, "rsa.test", true), p384}
	testcert.Write(t, dir, "p384.test", p384)
	var blocks string
	for _, name := range []string{"ec", "rsa", "p384"} {
		blocks += fmt.Sprintf("    certificate %q {\n      cert = %q\n      key  = %q\n    }\n", name,
			filepath.Join(dir, name+".test.pem"), filepath.Join(dir, name+".test.key"))
	}
	h := startLoop(t, baseConfig(workers, 4, "listener \"https\" {\n  address = \"127.0.0.1:0\"\n  tls {\n"+blocks+"  }\n}\n"))
	return &tlsHarness{loopHarness: h, keys: keys}
}

// recorder is a net.Conn that records what a crypto/tls client writes and
// ends its handshake at the first read.
type recorder struct {
	net.Conn // nil: only the methods below are called
	out      bytes.Buffer
}

func (r *recorder) Write(p []byte) (int, error) { return r.out.Write(p) }
func (r *recorder) Read([]byte) (int, error)    { return 0, errors.New("recorded") }
func (r *recorder) Close() error                { return nil }

// clientHello is the ClientHello record a crypto/tls client with cfg sends.
func clientHello(t *testing.T, cfg *tls.Config) []byte {
	t.Helper()
	r := &recorder{}
	cfg.InsecureSkipVerify = true
	tls.Client(r, cfg).Handshake()
	if r.out.Len() < recordHeader {
		t.Fatal("no ClientHello")
	}
	return r.out.Bytes()
}

// handshake connects from the address from, sends the ClientHello of a
// client with cfg and returns the connection and the Dispatch it causes,
// and the fake worker that got it.
func (h *tlsHarness) handshake(from string, cfg *tls.Config) (*net.TCPConn, *fakeProc, *proto.Dispatch) {
	h.t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: frameWait}
	nc, err := d.Dial("tcp", h.s.Addrs()[1].String())
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { nc.Close() })
	if _, err := nc.Write(clientHello(h.t, cfg)); err != nil {
		h.t.Fatal(err)
	}
	for deadline := time.Now().Add(frameWait); time.Now().Before(deadline); {
		for _, p := range h.workers {
			f, err := p.Next(10 * time.Millisecond)
			if err != nil || f.GetPressure() != nil || f.GetPing() != nil {
				continue
			}
			if f.GetDispatch() == nil || f.FD < 0 {
				h.t.Fatalf("worker %d: got %T, want a Dispatch with a descriptor", p.slot, f.Body)
			}
			// The supervisor peeked at the ClientHello before the
			// Dispatch; the fake reads it, as a worker would.
			readInput(f.FD)
			h.t.Cleanup(func() { syscall.Close(f.FD) })
			return nc.(*net.TCPConn), p, f.GetDispatch()
		}
	}
	h.t.Fatal("no Dispatch at any worker")
	return nil, nil, nil
}

// sign sends s from p with id and returns the SignReply, or nil when p was
// killed for it.
func (h *tlsHarness) sign(p *fakeProc, id uint64, s *proto.Sign) *proto.SignReply {
	h.t.Helper()
	if err := p.Send(&proto.Frame{Id: id, Body: &proto.Frame_Sign{Sign: s}}, -1); err != nil {
		h.t.Fatal(err)
	}
	for {
		f, err := p.Next(frameWait)
		if err != nil {
			if !p.killed.Load() {
				h.t.Fatalf("worker %d: %v", p.slot, err)
			}
			return nil
		}
		if r := f.GetSignReply(); r != nil && f.GetId() == id {
			return r
		}
		if f.GetPing() == nil && f.GetPressure() == nil {
			h.t.Fatalf("worker %d: got %T, want the SignReply", p.slot, f.Body)
		}
	}
}

// refused sends s and expects p killed for it, with no signature, the
// connections it held closed and their clients not penalized.
func (h *tlsHarness) refused(p *fakeProc, s *proto.Sign, held *net.TCPConn) {
	h.t.Helper()
	if r := h.sign(p, 99, s); r != nil {
		h.t.Fatalf("signed: %v", r)
	}
	h.killed(p, "the Sign")
	snap := h.waitFor("kill counted", func(s view.Snapshot) bool { return s.Counters["worker_kills"] == 1 })
	if len(snap.Penalties) != 0 {
		h.t.Errorf("clients penalized: %v", snap.Penalties)
	}
	if held != nil {
		if _, closed := closedByPeer(held); !closed {
			h.t.Error("a connection the worker held is still open")
		}
	}
}

var (
	digest256 = sha256.Sum256([]byte("handshake"))
	digest384 = sha512.Sum384([]byte("handshake"))
	digest512 = sha512.Sum512([]byte("handshake"))
)

// signFor is a Sign for the handshake d with key, hash and PSS.
func signFor(d *proto.Dispatch, key uint32, hash crypto.Hash, pss bool) *proto.Sign {
	digest := map[crypto.Hash][]byte{crypto.SHA256: digest256[:], crypto.SHA384: digest384[:], crypto.SHA512: digest512[:]}[hash]
	return &proto.Sign{ConnId: d.GetConnId(), KeyId: key, Hash: uint32(hash), Digest: digest, Pss: pss}
}

// verify checks sig over the digest of hash with pub.
func verify(pub crypto.PublicKey, hash crypto.Hash, pss bool, sig []byte) error {
	digest := signFor(nil, 0, hash, pss).GetDigest()
	switch pub := pub.(type) {
	case *ecdsa.PublicKey:
		if !ecdsa.VerifyASN1(pub, digest, sig) {
			return errors.New("ECDSA signature does not verify")
		}
		return nil
	case *rsa.PublicKey:
		if pss {
			return rsa.VerifyPSS(pub, hash, digest, sig, &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash})
		}
		return rsa.VerifyPKCS1v15(pub, hash, digest, sig)
	}
	return fmt.Errorf("a %T key", pub)
}

// A handshake gets one signature, with the key of the certificate the
// supervisor chose from its ClientHello (the server name, the client's
// algorithms), in a scheme the handshake could negotiate: on the loop for
// P-256, in the signing pool for RSA and P-384.
func TestSignDuringOwnHandshake(t *testing.T) {
	tls12 := uint16(tls.VersionTLS12)
	for _, tc := range []struct {
		name string
		cfg  *tls.Config
		key  uint32
		hash crypto.Hash
		pss  bool
	}{
		{"ec.test", &tls.Config{ServerName: "ec.test"}, 0, crypto.SHA256, false},
		{"no server name: the default", &tls.Config{}, 0, crypto.SHA256, false},
		{"unknown name: the default", &tls.Config{ServerName: "other.test"}, 0, crypto.SHA256, false},
		{"ECDSA in TLS 1.2: any hash", &tls.Config{ServerName: "ec.test", MaxVersion: tls12}, 0, crypto.SHA512, false},
		{"rsa.test", &tls.Config{ServerName: "rsa.test"}, 1, crypto.SHA256, true},
		{"RSA PKCS #1 v1.5 in TLS 1.2", &tls.Config{ServerName: "rsa.test", MaxVersion: tls12}, 1, crypto.SHA384, false},
		{"p384.test", &tls.Config{ServerName: "p384.test"}, 2, crypto.SHA384, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tlsLoop(t, 1)
			_, p, d := h.handshake("127.0.0.2", tc.cfg)
			if d.GetCertificate() != tc.key {
				t.Fatalf("certificate %d chosen, want %d", d.GetCertificate(), tc.key)
			}
			r := h.sign(p, 7, signFor(d, tc.key, tc.hash, tc.pss))
			if r == nil || r.GetError() != "" {
				t.Fatalf("reply %v", r)
			}
			if err := verify(h.keys[tc.key].Public(), tc.hash, tc.pss, r.GetSignature()); err != nil {
				t.Error(err)
			}
			s := h.snapshot()
			if s.Counters["tls_signs"] != 1 || s.Counters["tls_handshakes"] != 1 {
				t.Errorf("tls_signs %d, tls_handshakes %d, want 1 and 1", s.Counters["tls_signs"], s.Counters["tls_handshakes"])
			}
		})
	}
}

// TestSignOnlyDuringOwnHandshake: a Sign is admitted only for a TLS
// connection the worker holds on its first dispatch, before its Done,
// once, with the key of the certificate chosen for it and a scheme its
// handshake could negotiate. Anything else kills the worker, with no
// signature, its connections closed and their clients not penalized; the
// loop goes on serving.
func TestSignOnlyDuringOwnHandshake(t *testing.T) {
	ec := &tls.Config{ServerName: "ec.test"}
	for _, tc := range []struct {
		name string
		// run makes the violation and returns its Sign, the worker that
		// sends it and a connection that worker holds.
		run func(h *tlsHarness) (*fakeProc, *proto.Sign, *net.TCPConn)
	}{
		{"connection never dispatched", func(h *tlsHarness) (*fakeProc, *proto.Sign, *net.TCPConn) {
			nc, p, d := h.handshake("127.0.0.2", ec)
			s := signFor(d, 0, crypto.SHA256, false)
			s.ConnId += 1 << 20
			return p, s, nc
		}},
		{"another worker's connection", func(h *tlsHarness) (*fakeProc, *proto.Sign, *net.TCPConn) {
			_, p0, d0 := h.handshake("127.0.0.2", ec)
			nc1, p1, _ := h.handshake("127.0.0.3", ec)
			if p0 == p1 {
				h.t.Fatal("both connections at one worker")
			}
			return p1, signFor(d0, 0, crypto.SHA256, false), nc1
		}},
		{"a second Sign", func(h *tlsHarness) (*fakeProc, *proto.Sign, *net.TCPConn) {
			nc, p, d := h.handshake("127.0.0.2", ec)
			if r := h.sign(p, 7, signFor(d, 0, crypto.SHA256, false)); r == nil || r.GetError() != "" {
				h.t.Fatalf("the first Sign: %v", r)
			}
			return p, signFor(d, 0, crypto.SHA256, false), nc
		}},
		{"after its Done", func(h *tlsHarness) (*fakeProc, *proto.Sign, *net.TCPConn) {
			nc, p, d := h.handshake("127.0.0.2", ec)
			if err := p.Done(keptDone(d.GetConnId(), 0)); err != nil {
				h.t.Fatal(err)
			}
			h.waitFor("the connection kept", func(s view.Snapshot) bool { return s.AtWorkers == 0 })
			return p, signFor(d, 0, crypto.SHA256, false), nc
		}},
		{"dispatched again after its handshake", func(h *tlsHarness) (*fakeProc, *proto.Sign, *net.TCPConn) {
			nc, p, d := h.handshake("127.0.0.2", ec)
			if err := p.Done(keptDone(d.GetConnId(), 0)); err != nil {
				h.t.Fatal(err)
			}
			h.waitFor("the connection kept", func(s view.Snapshot) bool { return s.AtWorkers == 0 })
			// An application data record: dispatched to its keeper.
			if _, err := nc.Write([]byte{0x17, 3, 3, 0, 1, 0}); err != nil {
				h.t.Fatal(err)
			}
			for {
				f := h.next(p)
				if again := f.GetDispatch(); again != nil {
					if again.GetConnId() != d.GetConnId() || again.GetHasFd() {
						h.t.Fatalf("dispatched %v", again)
					}
					break
				}
			}
			return p, signFor(d, 0, crypto.SHA256, false), nc
		}},
		{"another key", func(h *tlsHarness) (*fakeProc, *proto.Sign, *net.TCPConn) {
			nc, p, d := h.handshake("127.0.0.2", &tls.Config{ServerName: "rsa.test"})
			return p, signFor(d, 0, crypto.SHA256, false), nc
		}},
		{"a key id out of range", func(h *tlsHarness) (*fakeProc, *proto.Sign, *net.TCPConn) {
			nc, p, d := h.handshake("127.0.0.2", ec)
			return p, signFor(d, 1<<31, crypto.SHA256, false), nc
		}},
		{"PSS with ECDSA", func(h *tlsHarness) (*fakeProc, *proto.Sign, *net.TCPConn) {
			nc, p, d := h.handshake("127.0.0.2", ec)
			return p, signFor(d, 0, crypto.SHA256, true), nc
		}},
		{"P-384 with SHA-256 in TLS 1.3", func(h *tlsHarness) (*fakeProc, *proto.Sign, *net.TCPConn) {
			nc, p, d := h.handshake("127.0.0.2", &tls.Config{ServerName: "p384.test"})
			return p, signFor(d, 2, crypto.SHA256, false), nc
		}},
		{"PKCS #1 v1.5 in TLS 1.3", func(h *tlsHarness) (*fakeProc, *proto.Sign, *net.TCPConn) {
			nc, p, d := h.handshake("127.0.0.2", &tls.Config{ServerName: "rsa.test"})
			return p, signFor(d, 1, crypto.SHA256, false), nc
		}},
		{"SHA-1", func(h *tlsHarness) (*fakeProc, *proto.Sign, *net.TCPConn) {
			nc, p, d := h.handshake("127.0.0.2", ec)
			s := signFor(d, 0, crypto.SHA256, false)
			s.Hash, s.Digest = uint32(crypto.SHA1), s.Digest[:20]
			return p, s, nc
		}},
		{"a hash out of range", func(h *tlsHarness) (*fakeProc, *proto.Sign, *net.TCPConn) {
			nc, p, d := h.handshake("127.0.0.2", ec)
			s := signFor(d, 0, crypto.SHA256, false)
			s.Hash = 1 << 30
			return p, s, nc
		}},
		{"a short digest", func(h *tlsHarness) (*fakeProc, *proto.Sign, *net.TCPConn) {
			nc, p, d := h.handshake("127.0.0.2", ec)
			s := signFor(d, 0, crypto.SHA256, false)
			s.Digest = s.Digest[:31]
			return p, s, nc
		}},
		{"a long digest", func(h *tlsHarness) (*fakeProc, *proto.Sign, *net.TCPConn) {
			nc, p, d := h.handshake("127.0.0.2", ec)
			s := signFor(d, 0, crypto.SHA256, false)
			s.Digest = digest512[:]
			return p, s, nc
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tlsLoop(t, 2)
			p, s, held := tc.run(h)
			signs := h.snapshot().Counters["tls_signs"]
			h.refused(p, s, held)
			if got := h.snapshot().Counters["tls_signs"]; got != signs {
				t.Errorf("tls_signs went from %d to %d", signs, got)
			}
			// The loop goes on: a new handshake is dispatched and signed.
			_, q, d := h.handshake("127.0.0.9", ec)
			if r := h.sign(q, 8, signFor(d, 0, crypto.SHA256, false)); r == nil || r.GetError() != "" {
				t.Fatalf("a proper Sign after the kill: %v", r)
			}
		})
	}
}

// Signatures slower than P-256's go to the signing pool: many in flight
// at once from one worker are all answered, each with its slot released,
// and the in-flight count is exact throughout (the invariants).
func TestSignPool(t *testing.T) {
	h := tlsLoop(t, 1)
	p := h.workers[0]
	var ds []*proto.Dispatch
	for i := range 3 {
		_, q, d := h.handshake(fmt.Sprintf("127.0.0.%d", 2+i), &tls.Config{ServerName: "p384.test"})
		if q != p {
			t.Fatal("a second worker")
		}
		ds = append(ds, d)
	}
	for i, d := range ds {
		if err := p.Send(&proto.Frame{Id: uint64(10 + i), Body: &proto.Frame_Sign{Sign: signFor(d, 2, crypto.SHA384, false)}}, -1); err != nil {
			t.Fatal(err)
		}
	}
	for got := 0; got < len(ds); {
		f := h.next(p)
		r := f.GetSignReply()
		if r == nil {
			continue
		}
		got++
		if err := verify(h.keys[2].Public(), crypto.SHA384, false, r.GetSignature()); err != nil {
			t.Errorf("reply %d: %v", f.GetId(), err)
		}
	}
	h.waitFor("the pool drained", func(s view.Snapshot) bool { return s.Counters["tls_signs"] == 3 })
}
