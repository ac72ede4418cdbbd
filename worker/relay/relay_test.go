package relay

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"io"
	"math/big"
	"net"
	"runtime"
	"testing"
	"time"
)

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// TestRelaySplice: two sockets spliced both ways carry the pre-read bytes
// first, then everything, and an EOF on one side is passed on as a
// half-close and ends the relay.
func TestRelaySplice(t *testing.T) {
	clientPeer, client := tcpPair(t)
	upstream, upstreamPeer := tcpPair(t)
	if runtime.GOOS == "linux" {
		// The pair splices: no fallback to the copy loop.
		a, b := tcpPair(t)
		s := &relayState{idle: time.Second}
		s.touch()
		go func() { a.Write([]byte("x")); a.CloseWrite() }()
		n, err := s.splice(socketSide{upstream}, socketSide{b})
		if err != nil || n != 1 {
			t.Fatalf("splice: %d bytes, %v", n, err)
		}
		one := make([]byte, 1)
		if _, err := io.ReadFull(upstreamPeer, one); err != nil || one[0] != 'x' {
			t.Fatalf("spliced byte: %q, %v", one, err)
		}
	}
	done := make(chan [2]int64, 1)
	go func() {
		a, b := Run(socketSide{client}, socketSide{upstream}, []byte("early-up:"), []byte("early-down:"), 5*time.Second)
		done <- [2]int64{a, b}
	}()
	big := make([]byte, 1<<20)
	rand.Read(big)
	go func() {
		clientPeer.Write(big)
		clientPeer.CloseWrite()
	}()
	got, err := io.ReadAll(io.LimitReader(upstreamPeer, int64(len("early-up:")+len(big))))
	if err != nil || !bytes.Equal(got, append([]byte("early-up:"), big...)) {
		t.Fatalf("upstream got %d bytes (%v), want the early bytes then 1 MiB", len(got), err)
	}
	// The client's EOF reached the upstream as a half-close.
	upstreamPeer.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := upstreamPeer.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("upstream after the client's EOF: %d bytes, %v", n, err)
	}
	upstreamPeer.Write([]byte("answer"))
	upstreamPeer.Close()
	clientPeer.SetReadDeadline(time.Now().Add(5 * time.Second))
	down, err := io.ReadAll(clientPeer)
	if err != nil || string(down) != "early-down:answer" {
		t.Fatalf("client got %q, %v", down, err)
	}
	select {
	case n := <-done:
		if n[0] != int64(len("early-down:answer")) || n[1] != int64(len("early-up:")+len(big)) {
			t.Errorf("relay counted %v", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("relay did not end")
	}
}

// TestRelayCost measures what an open relay costs: goroutines and heap per
// connection, idle, with the bytes spliced (docs/DESIGN.md §10).
func TestRelayCost(t *testing.T) {
	const n = 50
	type pair struct{ clientPeer, upstreamPeer *net.TCPConn }
	pairs := make([]pair, n)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	g0 := runtime.NumGoroutine()
	done := make(chan struct{}, n)
	for i := range pairs {
		cp, c := tcpPair(t)
		u, up := tcpPair(t)
		pairs[i] = pair{cp, up}
		go func() {
			Run(socketSide{c}, socketSide{u}, nil, nil, 30*time.Second)
			done <- struct{}{}
		}()
		// One exchange each way, so both directions have run.
		cp.Write([]byte("ping"))
		io.ReadFull(up, make([]byte, 4))
		up.Write([]byte("pong"))
		io.ReadFull(cp, make([]byte, 4))
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	goroutines := float64(runtime.NumGoroutine()-g0) / n
	heap := (int64(after.HeapInuse) - int64(before.HeapInuse)) / n
	t.Logf("per relayed connection: %.1f goroutines, %d bytes of heap (sockets and test included)", goroutines, heap)
	if goroutines > 2.5 {
		t.Errorf("%.1f goroutines per relay, want at most 2", goroutines)
	}
	if runtime.GOOS == "linux" && heap > 2*relayBufSize {
		t.Errorf("%d bytes of heap per spliced relay: copy buffers in use?", heap)
	}
	for _, p := range pairs {
		p.clientPeer.Close()
		p.upstreamPeer.Close()
	}
	for range pairs {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("relays did not end after both sides closed")
		}
	}
}

// tlsPair returns both ends of a loopback TLS connection, handshaken, and
// the server end's socket.
func tlsPair(t *testing.T, cfg *tls.Config) (client, server *tls.Conn, sock *net.TCPConn) {
	t.Helper()
	c, s := tcpPair(t)
	client = tls.Client(c, &tls.Config{InsecureSkipVerify: true})
	server = tls.Server(s, cfg)
	errc := make(chan error, 1)
	go func() { errc <- server.Handshake() }()
	if err := client.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	return client, server, s
}

// TestRelayTLSCost measures what an open relay of a TLS client costs beyond
// the TLS connection itself: goroutines and heap per connection, idle
// after one exchange each way (docs/DESIGN.md §10). Its plaintext is
// copied, so each direction holds a buffer.
func TestRelayTLSCost(t *testing.T) {
	const n = 50
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	type conns struct {
		client        *tls.Conn
		server        *tls.Conn
		sock          *net.TCPConn
		up, upstreamP *net.TCPConn
	}
	all := make([]conns, n)
	for i := range all {
		c, s, sock := tlsPair(t, cfg)
		// One exchange each way first, so that the TLS connections'
		// own buffers are counted before the relays start.
		go s.Write([]byte("ping"))
		io.ReadFull(c, make([]byte, 4))
		go c.Write([]byte("pong"))
		io.ReadFull(s, make([]byte, 4))
		u, up := tcpPair(t)
		all[i] = conns{c, s, sock, u, up}
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	g0 := runtime.NumGoroutine()
	done := make(chan struct{}, n)
	for _, p := range all {
		go func() {
			Run(&tlsSide{Conn: p.server, sock: p.sock}, socketSide{p.up}, nil, nil, 30*time.Second)
			done <- struct{}{}
		}()
		p.client.Write([]byte("ping"))
		io.ReadFull(p.upstreamP, make([]byte, 4))
		p.upstreamP.Write([]byte("pong"))
		io.ReadFull(p.client, make([]byte, 4))
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	goroutines := float64(runtime.NumGoroutine()-g0) / n
	heap := (int64(after.HeapInuse) - int64(before.HeapInuse)) / n
	t.Logf("per relayed TLS connection: %.1f goroutines, %d bytes of heap beyond the TLS connection (upstream sockets and test included)", goroutines, heap)
	if goroutines > 2.5 {
		t.Errorf("%.1f goroutines per relay, want at most 2", goroutines)
	}
	if heap > 3*relayBufSize {
		t.Errorf("%d bytes of heap per TLS relay, want about two copy buffers", heap)
	}
	for _, p := range all {
		p.client.Close()
		p.upstreamP.Close()
	}
	for range all {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("relays did not end after both sides closed")
		}
	}
}
