package worker

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/ipc"
	"github.com/gatehouse-dev/gatehouse/proto"
)

// signingWorker is a Worker whose caller, with cap in-flight slots, talks
// over a real socketpair to a stand-in supervisor that holds key and answers
// each Sign as answer decides. It returns the TLS configuration of its one
// listener, "https", and the supervisor's count of Sign requests.
func signingWorker(t *testing.T, cap int, answer func(*proto.Frame, *ecdsa.PrivateKey) *proto.Frame) (*tls.Config, func() int) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "a.test"}, DNSNames: []string{"a.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	ws, ss := streamPair(t)
	w := &Worker{}
	w.calls = caller{ch: ws, slots: ipc.NewInFlight(cap)}
	go func() {
		for {
			f := new(proto.Frame)
			fd, err := ws.Recv(f)
			if err != nil {
				return
			}
			w.calls.deliver(reply{f: f, fd: fd})
		}
	}()
	signs := make(chan struct{}, 64)
	go func() {
		for {
			f := new(proto.Frame)
			if _, err := ss.Recv(f); err != nil {
				return
			}
			signs <- struct{}{}
			if r := answer(f, key); r != nil {
				ss.Send(r, -1)
			}
		}
	}()
	cfgs, err := w.tlsConfigs([]*proto.TLSCertificate{{Listener: "https", Name: "a", Chain: [][]byte{der}, KeyId: 0}})
	if err != nil {
		t.Fatal(err)
	}
	return cfgs["https"], func() int { return len(signs) }
}

// handshake runs a client and the worker's server handshake over a pipe.
func pipeHandshake(cfg *tls.Config) (client, server error) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	errc := make(chan error, 1)
	go func() {
		c := tls.Client(a, &tls.Config{ServerName: "a.test", InsecureSkipVerify: true})
		c.SetDeadline(time.Now().Add(10 * time.Second))
		err := c.Handshake()
		if err == nil {
			// TLS 1.3: the client finishes first; read the server's
			// answer to its Finished (or the alert).
			c.Read(make([]byte, 1))
		}
		a.Close()
		errc <- err
	}()
	s := tls.Server(b, cfg)
	s.SetDeadline(time.Now().Add(10 * time.Second))
	server = s.Handshake()
	b.Close()
	return <-errc, server
}

func signAnswer(f *proto.Frame, key *ecdsa.PrivateKey) *proto.Frame {
	sig, err := ecdsa.SignASN1(rand.Reader, key, f.GetSign().GetDigest())
	if err != nil {
		return &proto.Frame{Id: f.GetId(), Body: &proto.Frame_SignReply{SignReply: &proto.SignReply{Error: err.Error()}}}
	}
	return &proto.Frame{Id: f.GetId(), Body: &proto.Frame_SignReply{SignReply: &proto.SignReply{Signature: sig}}}
}

// A handshake signs through the supervisor: the worker holds no key.
func TestHandshakeSignsThroughSupervisor(t *testing.T) {
	cfg, signs := signingWorker(t, 4, signAnswer)
	if _, err := pipeHandshake(cfg); err != nil {
		t.Fatalf("handshake: %v", err)
	}
	if signs() != 1 {
		t.Errorf("%d Sign requests, want 1", signs())
	}
	if len(cfg.Certificates) != 0 {
		t.Error("the configuration holds certificates outside GetCertificate")
	}
}

// Over the in-flight cap a handshake fails at once: refused by the
// supervisor (Overloaded), or with no slot free in the worker, where it is
// never sent.
func TestHandshakeOverloadedFailsAtOnce(t *testing.T) {
	overloaded := func(f *proto.Frame, _ *ecdsa.PrivateKey) *proto.Frame {
		return &proto.Frame{Id: f.GetId(), Body: &proto.Frame_Overloaded{Overloaded: &proto.Overloaded{}}}
	}
	cfg, signs := signingWorker(t, 4, overloaded)
	if _, err := pipeHandshake(cfg); err == nil || !strings.Contains(err.Error(), "in-flight cap") {
		t.Errorf("handshake refused by the supervisor: %v", err)
	}
	if signs() != 1 {
		t.Errorf("%d Sign requests, want 1", signs())
	}

	// One slot, held by a Sign the supervisor never answers.
	never := func(*proto.Frame, *ecdsa.PrivateKey) *proto.Frame { return nil }
	cfg, signs = signingWorker(t, 1, never)
	go pipeHandshake(cfg)
	for i := 0; i < 500 && signs() == 0; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if signs() != 1 {
		t.Fatal("the first handshake's Sign did not arrive")
	}
	done := make(chan error, 1)
	go func() { _, err := pipeHandshake(cfg); done <- err }()
	select {
	case err := <-done:
		if err == nil || !errors.Is(err, errSignOverloaded) && !strings.Contains(err.Error(), "in-flight cap") {
			t.Errorf("handshake over the cap: %v", err)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("a handshake over the in-flight cap waited")
	}
	if signs() != 1 {
		t.Errorf("%d Sign requests reached the supervisor, want 1", signs())
	}
}

// A Sign whose reply never comes ends at the handshake's deadline, which
// rides in the handshake's context (handshakeInfo) without being the
// context's own, and the handshake counts as timed out.
func TestHandshakeSignWaitEndsAtDeadline(t *testing.T) {
	never := func(*proto.Frame, *ecdsa.PrivateKey) *proto.Frame { return nil }
	cfg, signs := signingWorker(t, 4, never)
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() {
		c := tls.Client(a, &tls.Config{ServerName: "a.test", InsecureSkipVerify: true})
		c.SetDeadline(time.Now().Add(10 * time.Second))
		c.Handshake()
	}()
	hs := &handshakeInfo{deadline: time.Now().Add(200 * time.Millisecond)}
	ctx := context.WithValue(context.Background(), handshakeKey{}, hs)
	if ctx.Done() != nil {
		t.Fatal("the handshake's context has a Done channel: crypto/tls would watch it with a goroutine")
	}
	s := tls.Server(b, cfg)
	s.SetDeadline(time.Now().Add(10 * time.Second))
	done := make(chan error, 1)
	go func() { done <- s.HandshakeContext(ctx) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a handshake whose Sign was never answered succeeded")
		}
		if !hs.timedOut.Load() {
			t.Errorf("handshake failed with %v, not marked timed out", err)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("the Sign wait outlasted its deadline")
	}
	if signs() != 1 {
		t.Errorf("%d Sign requests, want 1", signs())
	}
}
