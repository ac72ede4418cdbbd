// Command slowattack is the benchmark's distributed slow-client attacker: many
// connections from many loopback source addresses, each sending a request
// slowly and dialing again when the server closes it, for a bounded time.
//
//	slowattack -mode heads  -addr 127.0.0.1:18086 -n 3000 -addrs 50 -every 3s -duration 40s
//	slowattack -mode bodies -addr 127.0.0.1:18086 -n 40 -addrs 5 -length 1000000 -piece 2048 -every 100ms -duration 40s
//
// heads: each connection sends the start of a request head, then one header
// line every -every, never ending the head. bodies: each connection sends a
// complete POST head with Content-Length -length, then -piece bytes every
// -every (2 KiB every 100 ms is about 20 KiB/s, above gatehouse's minimum body
// rate). Sources are 127.0.0.10, 127.0.0.11, ... (-addrs of them). When
// -duration ends it prints one JSON object (dials, server closes, peak open)
// and exits.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type result struct {
	Mode           string `json:"mode"`
	Conns          int    `json:"conns"`
	Addrs          int    `json:"addrs"`
	Dials          int64  `json:"dials"`
	DialErrors     int64  `json:"dial_errors"`
	ClosedByServer int64  `json:"closed_by_server"`
	PeakOpen       int64  `json:"peak_open"`
	BodiesSent     int64  `json:"bodies_sent"`
}

func main() {
	mode := flag.String("mode", "heads", "heads or bodies")
	addr := flag.String("addr", "127.0.0.1:18081", "server address")
	n := flag.Int("n", 3000, "connections held at once")
	addrs := flag.Int("addrs", 50, "source addresses, from 127.0.0.10")
	every := flag.Duration("every", 3*time.Second, "interval between sends")
	length := flag.Int("length", 1000000, "bodies: Content-Length")
	piece := flag.Int("piece", 2048, "bodies: bytes per send")
	path := flag.String("path", "/", "request path")
	dur := flag.Duration("duration", 40*time.Second, "how long to attack")
	flag.Parse()
	if *addrs < 1 || *addrs > 200 {
		fmt.Fprintln(os.Stderr, "slowattack: -addrs must be 1..200")
		os.Exit(2)
	}

	ctx, cancel := context.WithTimeout(context.Background(), *dur)
	defer cancel()
	res := result{Mode: *mode, Conns: *n, Addrs: *addrs}
	var dials, dialErrs, closed, open, peak, bodies atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < *n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			src := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(10+i%*addrs))}
			if !sleep(ctx, time.Duration(i)*(*every)/time.Duration(*n)) {
				return
			}
			for ctx.Err() == nil {
				d := net.Dialer{Timeout: 3 * time.Second, LocalAddr: src}
				c, err := d.DialContext(ctx, "tcp", *addr)
				if err != nil {
					dialErrs.Add(1)
					sleep(ctx, 100*time.Millisecond)
					continue
				}
				dials.Add(1)
				if o := open.Add(1); o > peak.Load() {
					peak.Store(o)
				}
				var done bool
				if *mode == "bodies" {
					done = sendBody(ctx, c, *path, *length, *piece, *every)
					if done {
						bodies.Add(1)
					}
				} else {
					sendHead(ctx, c, *path, *every)
				}
				if ctx.Err() == nil && !done {
					closed.Add(1)
				}
				open.Add(-1)
				c.Close()
			}
		}(i)
	}
	wg.Wait()
	res.Dials, res.DialErrors, res.ClosedByServer, res.PeakOpen, res.BodiesSent =
		dials.Load(), dialErrs.Load(), closed.Load(), peak.Load(), bodies.Load()
	json.NewEncoder(os.Stdout).Encode(res)
}

// sendHead dribbles a head that never ends until the server closes c or ctx ends.
func sendHead(ctx context.Context, c net.Conn, path string, every time.Duration) {
	if !write(c, "GET "+path+" HTTP/1.1\r\nHost: bench\r\n") {
		return
	}
	for i := 0; sleep(ctx, every); i++ {
		if !write(c, fmt.Sprintf("X-Slow-%d: a\r\n", i)) {
			return
		}
	}
}

// sendBody sends a POST whose body arrives piece by piece; it reports whether
// the whole body was sent.
func sendBody(ctx context.Context, c net.Conn, path string, length, piece int, every time.Duration) bool {
	if !write(c, fmt.Sprintf("POST %s HTTP/1.1\r\nHost: bench\r\nContent-Length: %d\r\n\r\n", path, length)) {
		return false
	}
	chunk := strings.Repeat("b", piece)
	for sent := 0; sent < length; {
		k := min(piece, length-sent)
		if !write(c, chunk[:k]) {
			return false
		}
		sent += k
		if sent < length && !sleep(ctx, every) {
			return false
		}
	}
	return true
}

func write(c net.Conn, s string) bool {
	c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Write([]byte(s))
	return err == nil
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
