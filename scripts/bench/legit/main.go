// Command legit is the benchmark's legitimate client: it sends sequential
// GET requests from one loopback source address, each on a new connection
// (or on one kept-alive connection with -keepalive), and prints one JSON
// object with the number sent and answered and the latency percentiles.
//
//	legit -addr 127.0.0.1:18081 -src 127.0.0.3 -n 500
//	legit -addr 127.0.0.1:18081 -src 127.0.0.3 -duration 30s
//
// A request succeeds when the answer is 200 with the expected body within
// -timeout (connect included). The exit status is 0 whatever the outcome;
// the caller judges the figures.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"time"
)

type result struct {
	Sent      int            `json:"sent"`
	OK        int            `json:"ok"`
	Failed    int            `json:"failed"`
	Errors    map[string]int `json:"errors,omitempty"`
	FirstErr  string         `json:"first_error,omitempty"`
	P50ms     float64        `json:"p50_ms"`
	P90ms     float64        `json:"p90_ms"`
	P99ms     float64        `json:"p99_ms"`
	MaxMs     float64        `json:"max_ms"`
	ElapsedS  float64        `json:"elapsed_s"`
	Src       string         `json:"src"`
	KeepAlive bool           `json:"keepalive"`
}

func main() {
	addr := flag.String("addr", "127.0.0.1:18081", "server address")
	src := flag.String("src", "127.0.0.3", "local source address")
	n := flag.Int("n", 500, "requests to send (0: as many as -duration allows)")
	dur := flag.Duration("duration", 0, "send for this long instead of -n requests")
	timeout := flag.Duration("timeout", 10*time.Second, "per request, connect included")
	path := flag.String("path", "/", "request path")
	want := flag.String("body", "hello, world\n", "expected body (empty: any)")
	ka := flag.Bool("keepalive", false, "reuse one connection (reconnect on failure)")
	pause := flag.Duration("pause", 0, "pause between requests")
	flag.Parse()

	res := result{Errors: map[string]int{}, Src: *src, KeepAlive: *ka}
	var lat []time.Duration
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(*src)}}
	var c net.Conn
	var br *bufio.Reader
	start := time.Now()
	for i := 0; ; i++ {
		if *dur > 0 {
			if time.Since(start) >= *dur {
				break
			}
		} else if i >= *n {
			break
		}
		t0 := time.Now()
		err := func() error {
			if c == nil {
				d.Timeout = *timeout
				var err error
				c, err = d.Dial("tcp", *addr)
				if err != nil {
					return err
				}
				br = bufio.NewReader(c)
			}
			c.SetDeadline(t0.Add(*timeout))
			hdr := "Connection: close\r\n"
			if *ka {
				hdr = ""
			}
			if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: bench\r\nUser-Agent: legit\r\n%s\r\n", *path, hdr); err != nil {
				return err
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				return err
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				return err
			}
			if resp.StatusCode != 200 {
				return fmt.Errorf("status %d", resp.StatusCode)
			}
			if *want != "" && string(body) != *want {
				return fmt.Errorf("body %.40q", body)
			}
			if !*ka || resp.Close {
				c.Close()
				c = nil
			}
			return nil
		}()
		el := time.Since(t0)
		res.Sent++
		if err != nil {
			if c != nil {
				c.Close()
				c = nil
			}
			res.Failed++
			k := classify(err)
			res.Errors[k]++
			if res.FirstErr == "" {
				res.FirstErr = fmt.Sprintf("request %d after %v: %v", i, el.Round(time.Millisecond), err)
			}
		} else {
			res.OK++
			lat = append(lat, el)
		}
		if *pause > 0 {
			time.Sleep(*pause)
		}
	}
	if c != nil {
		c.Close()
	}
	res.ElapsedS = time.Since(start).Seconds()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	res.P50ms, res.P90ms, res.P99ms = pct(lat, 50), pct(lat, 90), pct(lat, 99)
	if len(lat) > 0 {
		res.MaxMs = ms(lat[len(lat)-1])
	}
	json.NewEncoder(os.Stdout).Encode(res)
}

func classify(err error) string {
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return "timeout"
	}
	s := err.Error()
	switch {
	case len(s) > 7 && s[:7] == "status ":
		return s
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		return "eof"
	}
	if oe, ok := err.(*net.OpError); ok {
		return oe.Op + ": " + oe.Err.Error()
	}
	return "other"
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// pct is the nearest-rank percentile of sorted latencies.
func pct(s []time.Duration, p float64) float64 {
	if len(s) == 0 {
		return 0
	}
	i := int(float64(len(s))*p/100+0.999999) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(s) {
		i = len(s) - 1
	}
	return ms(s[i])
}
