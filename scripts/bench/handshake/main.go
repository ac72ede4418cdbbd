// Command handshake measures new full TLS handshakes per second: -c
// goroutines each loop for -d over dial, a full handshake, one
// "Connection: close" GET and its whole answer, and close.
//
//	handshake -addr 127.0.0.1:18091 -c 64 -d 10s
//
// No client session cache is set, so no session is ever resumed (each
// handshake's DidResume is checked and counted, and must stay 0); the key
// exchange is X25519 only, so every server agrees on the same one (Go would
// otherwise offer a post-quantum hybrid that OpenSSL builds without it
// refuse). Certificates are not verified (they are the bench's own,
// self-signed), but the server's handshake signature is, as always in
// crypto/tls. It prints one JSON line: counts, rate, latency percentiles of
// dial-to-answer, and the negotiated version and suite.
package main

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/gatehouse-dev/gatehouse/scripts/bench/internal/errkind"
)

type report struct {
	Handshakes    int            `json:"handshakes"`
	Resumed       int            `json:"resumed"`
	Failed        int            `json:"failed"`
	Errors        map[string]int `json:"errors,omitempty"`
	Seconds       float64        `json:"seconds"`
	PerSecond     float64        `json:"handshakes_per_second"`
	P50ms         float64        `json:"p50_ms"`
	P99ms         float64        `json:"p99_ms"`
	Version       string         `json:"version"`
	CipherSuite   string         `json:"cipher_suite"`
	Concurrency   int            `json:"concurrency"`
	KeyExchange   string         `json:"key_exchange"`
	ResumptionOff bool           `json:"client_session_cache_off"`
}

func main() {
	addr := flag.String("addr", "127.0.0.1:18091", "server address")
	conc := flag.Int("c", 64, "concurrent connections")
	dur := flag.Duration("d", 10*time.Second, "duration")
	sni := flag.String("servername", "bench", "SNI server name")
	flag.Parse()

	cfg := &tls.Config{
		ServerName:         *sni,
		InsecureSkipVerify: true,
		NextProtos:         []string{"http/1.1"},
		CurvePreferences:   []tls.CurveID{tls.X25519},
		MinVersion:         tls.VersionTLS12,
	}
	var (
		mu      sync.Mutex
		r       = report{Errors: map[string]int{}, Concurrency: *conc, KeyExchange: "X25519", ResumptionOff: true}
		lats    []time.Duration
		wg      sync.WaitGroup
		start   = time.Now()
		stop    = start.Add(*dur)
		lastEnd time.Time
	)
	for g := 0; g < *conc; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for time.Now().Before(stop) {
				t0 := time.Now()
				st, err := once(*addr, cfg)
				mu.Lock()
				if err != nil {
					r.Failed++
					r.Errors[errkind.Of(err)]++
				} else {
					mine = append(mine, time.Since(t0))
					r.Handshakes++
					if st.DidResume {
						r.Resumed++
					}
					r.Version = tls.VersionName(st.Version)
					r.CipherSuite = tls.CipherSuiteName(st.CipherSuite)
				}
				mu.Unlock()
			}
			mu.Lock()
			lats = append(lats, mine...)
			if now := time.Now(); now.After(lastEnd) {
				lastEnd = now
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	// Handshakes started before the deadline may end after it: the rate is
	// over the time until the last one ended.
	r.Seconds = lastEnd.Sub(start).Seconds()
	if r.Seconds > 0 {
		r.PerSecond = float64(r.Handshakes) / r.Seconds
	}
	if len(lats) > 0 {
		slices.Sort(lats)
		r.P50ms = float64(lats[len(lats)/2]) / 1e6
		r.P99ms = float64(lats[len(lats)*99/100]) / 1e6
	}
	json.NewEncoder(os.Stdout).Encode(r)
}

// once makes one connection: full handshake, one request, the whole answer.
func once(addr string, cfg *tls.Config) (tls.ConnectionState, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	tc := tls.Client(c, cfg)
	if err := tc.Handshake(); err != nil {
		return tls.ConnectionState{}, err
	}
	if _, err := io.WriteString(tc, "GET / HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n"); err != nil {
		return tls.ConnectionState{}, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != 200 {
		err = fmt.Errorf("status %d", resp.StatusCode)
	}
	return tc.ConnectionState(), err
}
