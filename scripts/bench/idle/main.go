// Command idle opens and holds many idle connections to a server, spread
// over several loopback source addresses so no per-client cap refuses them.
//
//	idle -addr 127.0.0.1:18081 -n 10000 -addrs 50 -first 10 [-request] -hold 30s
//
// Connections come from 127.0.0.<first> .. 127.0.0.<first+addrs-1> (127.0.<k>.<j>
// beyond 254). With -request each sends one keep-alive GET and reads the answer
// before going quiet; without it they never send a byte. Once every dial has
// finished (or -open-timeout passed) it prints one JSON line {"phase":"ready",...}
// and holds the connections for -hold (or until SIGINT/SIGTERM), then counts
// how many the server has closed meanwhile, prints {"phase":"done",...} and exits.
// With -tls each connection first completes a full TLS handshake (X25519, no
// session cache, the certificate not verified) and holds the TLS connection.
package main

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gatehouse-dev/gatehouse/scripts/bench/internal/errkind"
)

type report struct {
	Phase     string         `json:"phase"`
	Wanted    int            `json:"wanted"`
	Opened    int            `json:"opened"`
	Answered  int            `json:"answered"`
	Failed    int            `json:"failed"`
	StillOpen int            `json:"still_open"`
	Errors    map[string]int `json:"errors,omitempty"`
	Seconds   float64        `json:"seconds"`
}

func main() {
	addr := flag.String("addr", "127.0.0.1:18081", "server address")
	n := flag.Int("n", 10000, "connections")
	addrs := flag.Int("addrs", 50, "source addresses")
	first := flag.Int("first", 10, "first source address index (127.0.0.<first>)")
	request := flag.Bool("request", false, "send one request on each connection first")
	hold := flag.Duration("hold", 30*time.Second, "how long to hold them")
	openTimeout := flag.Duration("open-timeout", 60*time.Second, "give up opening after this long")
	par := flag.Int("parallel", 128, "dials in flight")
	useTLS := flag.Bool("tls", false, "complete a TLS handshake on each connection")
	flag.Parse()
	tcfg := &tls.Config{ServerName: "bench", InsecureSkipVerify: true, NextProtos: []string{"http/1.1"},
		CurvePreferences: []tls.CurveID{tls.X25519}, MinVersion: tls.VersionTLS12}

	start := time.Now()
	deadline := start.Add(*openTimeout)
	conns := make([]net.Conn, *n)
	var answered, failed atomic.Int64
	var mu sync.Mutex
	errs := map[string]int{}
	note := func(e error) {
		failed.Add(1)
		mu.Lock()
		errs[errkind.Of(e)]++
		mu.Unlock()
	}
	jobs := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < *par; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if time.Now().After(deadline) {
					note(errors.New("open-timeout"))
					continue
				}
				k := *first + i%*addrs
				ip := net.IPv4(127, 0, byte(k/254), byte(1+k%254))
				if k < 254 {
					ip = net.IPv4(127, 0, 0, byte(k))
				}
				d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: ip}}
				c, err := d.Dial("tcp", *addr)
				if err != nil {
					note(err)
					continue
				}
				if *useTLS {
					tc := tls.Client(c, tcfg)
					c.SetDeadline(time.Now().Add(10 * time.Second))
					if err := tc.Handshake(); err != nil {
						c.Close()
						note(err)
						continue
					}
					c.SetDeadline(time.Time{})
					c = tc
				}
				if *request {
					c.SetDeadline(time.Now().Add(10 * time.Second))
					fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: bench\r\n\r\n")
					resp, err := http.ReadResponse(bufio.NewReader(c), nil)
					if err == nil {
						_, err = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if err == nil && resp.StatusCode != 200 {
							err = fmt.Errorf("status %d", resp.StatusCode)
						}
					}
					c.SetDeadline(time.Time{})
					if err != nil {
						c.Close()
						note(err)
						continue
					}
					answered.Add(1)
				}
				conns[i] = c
			}
		}()
	}
	for i := 0; i < *n; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	opened := 0
	for _, c := range conns {
		if c != nil {
			opened++
		}
	}
	enc := json.NewEncoder(os.Stdout)
	r := report{Phase: "ready", Wanted: *n, Opened: opened, Answered: int(answered.Load()),
		Failed: int(failed.Load()), Errors: errs, Seconds: time.Since(start).Seconds()}
	enc.Encode(r)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case <-time.After(*hold):
	case <-sig:
	}
	// Which connections did the server close while we held them?
	var still atomic.Int64
	var cw sync.WaitGroup
	for _, c := range conns {
		if c == nil {
			continue
		}
		cw.Add(1)
		go func(c net.Conn) {
			defer cw.Done()
			c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			var b [1]byte
			_, err := c.Read(b[:])
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				still.Add(1)
			}
		}(c)
	}
	cw.Wait()
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
	r.Phase, r.StillOpen, r.Seconds = "done", int(still.Load()), time.Since(start).Seconds()
	enc.Encode(r)
}
