// Command wsload measures WebSocket echo messages per second through a
// proxy: -c connections each upgrade GET -path, then loop for -d over one
// masked binary message of -size bytes sent and its echo read back whole
// (request/response, one message in flight per connection).
//
//	wsload -addr 127.0.0.1:18102 -tls -c 16 -size 1024 -d 5s -addrs 16
//
// With -addrs N, connection i comes from 127.0.0.(2 + i mod N), so that a
// server's per-client limits see N clients (0: the kernel's choice, 127.0.0.1).
//
// With -tls it speaks TLS 1.2/1.3 over X25519 without verifying the bench's
// self-signed certificate, offering only http/1.1 in ALPN. Every echo is
// compared with what was sent. It prints one JSON line: connections
// upgraded, messages echoed, their rate, the bytes echoed per second (one
// direction), latency percentiles of send-to-echo, and errors by kind.
package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/gatehouse-dev/gatehouse/scripts/bench/internal/errkind"
	"github.com/gatehouse-dev/gatehouse/scripts/bench/internal/wsframe"
)

type report struct {
	Upgraded    int            `json:"upgraded"`
	Messages    int            `json:"messages"`
	Failed      int            `json:"failed"`
	Errors      map[string]int `json:"errors,omitempty"`
	Seconds     float64        `json:"seconds"`
	PerSecond   float64        `json:"messages_per_second"`
	BytesPerSec float64        `json:"bytes_per_second"`
	P50ms       float64        `json:"p50_ms"`
	P99ms       float64        `json:"p99_ms"`
	Size        int            `json:"size"`
	Conns       int            `json:"conns"`
	TLS         bool           `json:"tls"`
}

func main() {
	addr := flag.String("addr", "127.0.0.1:18102", "server address")
	useTLS := flag.Bool("tls", false, "speak TLS")
	path := flag.String("path", "/ws", "upgrade request's path")
	conns := flag.Int("c", 16, "connections")
	size := flag.Int("size", 1024, "message size in bytes")
	dur := flag.Duration("d", 5*time.Second, "duration")
	addrs := flag.Int("addrs", 0, "source addresses 127.0.0.2 upwards (0: 127.0.0.1); at most 252")
	flag.Parse()
	if *addrs < 0 || *addrs > 252 {
		fmt.Fprintln(os.Stderr, "wsload: -addrs must be 0..252")
		os.Exit(2)
	}

	var cfg *tls.Config
	if *useTLS {
		cfg = &tls.Config{ServerName: "bench", InsecureSkipVerify: true, NextProtos: []string{"http/1.1"},
			CurvePreferences: []tls.CurveID{tls.X25519}, MinVersion: tls.VersionTLS12}
	}
	var (
		mu   sync.Mutex
		r    = report{Errors: map[string]int{}, Size: *size, Conns: *conns, TLS: *useTLS}
		lats []time.Duration
		wg   sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		r.Failed++
		r.Errors[errkind.Of(err)]++
		mu.Unlock()
	}
	// Every connection upgrades first; the clock starts once all have.
	ready := make(chan *session, *conns)
	for i := 0; i < *conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var src net.Addr
			if *addrs > 0 {
				src = &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%*addrs))}
			}
			s, err := open(*addr, *path, cfg, src)
			if err != nil {
				fail(err)
				ready <- nil
				return
			}
			ready <- s
		}()
	}
	wg.Wait()
	close(ready)
	var sessions []*session
	for s := range ready {
		if s != nil {
			sessions = append(sessions, s)
		}
	}
	r.Upgraded = len(sessions)
	start := time.Now()
	stop := start.Add(*dur)
	for _, s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.conn.Close()
			mine, err := s.run(*size, stop)
			mu.Lock()
			lats = append(lats, mine...)
			mu.Unlock()
			if err != nil {
				fail(err)
			}
		}()
	}
	wg.Wait()
	r.Seconds = time.Since(start).Seconds()
	r.Messages = len(lats)
	if r.Seconds > 0 {
		r.PerSecond = float64(r.Messages) / r.Seconds
		r.BytesPerSec = r.PerSecond * float64(*size)
	}
	if len(lats) > 0 {
		slices.Sort(lats)
		r.P50ms = float64(lats[len(lats)/2]) / 1e6
		r.P99ms = float64(lats[len(lats)*99/100]) / 1e6
	}
	json.NewEncoder(os.Stdout).Encode(r)
}

type session struct {
	conn net.Conn
	br   *bufio.Reader
}

// open dials addr and upgrades path to a WebSocket, checking the 101's
// Sec-WebSocket-Accept.
func open(addr, path string, cfg *tls.Config, src net.Addr) (*session, error) {
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: src}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if cfg != nil {
		tc := tls.Client(c, cfg)
		if err := tc.Handshake(); err != nil {
			c.Close()
			return nil, err
		}
		c = tc
	}
	var k [16]byte
	rand.Read(k[:])
	key := base64.StdEncoding.EncodeToString(k[:])
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: bench\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", path, key); err != nil {
		c.Close()
		return nil, err
	}
	br := bufio.NewReaderSize(c, 64<<10)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		c.Close()
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-WebSocket-Accept") != wsframe.Accept(key) {
		c.Close()
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	c.SetDeadline(time.Time{})
	return &session{conn: c, br: br}, nil
}

// run sends a message and reads its echo until stop, returning each
// round trip's latency; it ends the session with a close frame.
func (s *session) run(size int, stop time.Time) ([]time.Duration, error) {
	msg := make([]byte, size)
	rand.Read(msg)
	var mask [4]byte
	var out, in []byte
	var lats []time.Duration
	for time.Now().Before(stop) {
		rand.Read(mask[:])
		out = wsframe.Append(out[:0], wsframe.OpBinary, msg, &mask)
		s.conn.SetDeadline(time.Now().Add(10 * time.Second))
		t0 := time.Now()
		if _, err := s.conn.Write(out); err != nil {
			return lats, err
		}
		op, payload, err := wsframe.Read(s.br, in)
		if err != nil {
			return lats, err
		}
		in = payload[:0]
		if op != wsframe.OpBinary || !bytes.Equal(payload, msg) {
			return lats, errors.New("echo differs")
		}
		lats = append(lats, time.Since(t0))
	}
	rand.Read(mask[:])
	s.conn.Write(wsframe.Append(out[:0], wsframe.OpClose, []byte{0x03, 0xE8}, &mask))
	return lats, nil
}
