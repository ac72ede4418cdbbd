//go:build linux

// Command loadgen drives HTTP/1.1 load at a server from many loopback
// source addresses and reports what it cost the client too:
//
//	loadgen -addr 127.0.0.1:18081 -mode keepalive -c 64 -d 5s -addrs 64
//	loadgen -addr 127.0.0.1:18081 -mode close -c 256 -d 5s
//	loadgen -addr 127.0.0.1:18091 -mode close -tls -c 64 -d 5s   # a new full handshake per request
//	loadgen -addr 127.0.0.1:18081 -mode close -c 16 -n 2000        # exactly 2000 connections
//
// -c clients each loop for -d: with -mode keepalive a client dials once
// (before the clock starts) and sends its requests one after another on
// that connection, redialling only when the server closes it; with -mode
// close every request is a new connection with "Connection: close", read
// to the end of the response and closed. With -tls each connection first
// completes a full handshake (X25519, no client session cache, so no
// resumption; the certificate is not verified). -paths is a comma-separated
// list a client cycles through.
//
// Connections come from -addrs source addresses, 127.0.0.2 upwards (then
// 127.0.1.x, ...), bound with IP_BIND_ADDRESS_NO_PORT so that the port is
// chosen at connect time and each address has the whole ephemeral range:
// a server that keeps a share per client address sees -addrs clients, not
// one. The client is a minimal one (a prebuilt request, a response parsed
// only for its framing) so its cost per request stays small; it reports
// that cost from getrusage (user and system CPU over the run, per request),
// so a ratio between servers can be read with the client's share in mind.
//
// It prints one JSON line: requests completed within -d and their rate,
// errors by kind, non-2xx answers, bytes, latency percentiles (dial
// included for -mode close), and the client's CPU.
package main

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gatehouse-dev/gatehouse/scripts/bench/internal/errkind"
)

type report struct {
	Mode        string         `json:"mode"`
	TLS         bool           `json:"tls"`
	Conns       int            `json:"conns"`
	Addrs       int            `json:"source_addresses"`
	Seconds     float64        `json:"seconds"`
	Requests    int64          `json:"requests"`
	Total       int64          `json:"requests_total"`
	PerSecond   float64        `json:"rps"`
	Bytes       int64          `json:"bytes"`
	BytesPerSec float64        `json:"bytes_per_s"`
	Non2xx      int64          `json:"non2xx"`
	Failed      int64          `json:"failed"`
	Errors      map[string]int `json:"errors,omitempty"`
	Dials       int64          `json:"dials"`
	Resumed     int64          `json:"resumed"`
	P50ms       float64        `json:"p50_ms"`
	P90ms       float64        `json:"p90_ms"`
	P99ms       float64        `json:"p99_ms"`
	P999ms      float64        `json:"p999_ms"`
	MaxMs       float64        `json:"max_ms"`
	CPUUser     float64        `json:"client_cpu_user_s"`
	CPUSys      float64        `json:"client_cpu_sys_s"`
	CPUPerReq   float64        `json:"client_cpu_us_per_request"`
	Version     string         `json:"tls_version,omitempty"`
}

type config struct {
	addr     string
	keep     bool
	tls      *tls.Config
	reqs     [][]byte
	timeout  time.Duration
	sources  []net.IP
	stop     time.Time // no request starts after it
	hardStop time.Time // in-flight requests are cut off here
	budget   *atomic.Int64
	conns    int
}

// counters are one load loop's results, merged at the end.
type counters struct {
	lat             hist
	inWindow, total int64
	bytes           int64
	non2xx, failed  int64
	dials, resumed  int64
	errs            map[string]int
	version         uint16
}

func newCounters() counters { return counters{errs: map[string]int{}} }

// client is one connection's load loop in the goroutine engine.
type client struct {
	counters
	cfg               *config
	nextSrc, nextPath int
	conn              net.Conn
	rd                *bufio.Reader
}

func main() {
	addr := flag.String("addr", "127.0.0.1:18081", "server address")
	mode := flag.String("mode", "keepalive", "keepalive or close")
	useTLS := flag.Bool("tls", false, "speak TLS: a full handshake on every new connection")
	conns := flag.Int("c", 64, "concurrent clients (connections)")
	dur := flag.Duration("d", 5*time.Second, "duration")
	total := flag.Int64("n", 0, "stop after this many requests (0: run for -d)")
	addrs := flag.Int("addrs", 64, "source addresses (127.0.0.2 upwards)")
	paths := flag.String("paths", "/", "comma-separated request targets, cycled by each client")
	host := flag.String("host", "bench", "Host header and TLS server name")
	timeout := flag.Duration("timeout", 10*time.Second, "per-request timeout (dial included)")
	engine := flag.String("engine", "epoll", "epoll (event loops, plain HTTP without chunked bodies) or go (a goroutine a client; always with -tls)")
	threads := flag.Int("threads", 2, "event loops of the epoll engine")
	flag.Parse()
	if *useTLS {
		*engine = "go"
	}
	if *mode != "keepalive" && *mode != "close" || *conns < 1 || *addrs < 1 {
		fmt.Fprintln(os.Stderr, "loadgen: -mode must be keepalive or close; -c and -addrs at least 1")
		os.Exit(2)
	}
	cfg := &config{addr: *addr, keep: *mode == "keepalive", timeout: *timeout, conns: *conns}
	for _, p := range strings.Split(*paths, ",") {
		req := "GET " + p + " HTTP/1.1\r\nHost: " + *host + "\r\n"
		if !cfg.keep {
			req += "Connection: close\r\n"
		}
		cfg.reqs = append(cfg.reqs, []byte(req+"\r\n"))
	}
	if *useTLS {
		cfg.tls = &tls.Config{ServerName: *host, InsecureSkipVerify: true, NextProtos: []string{"http/1.1"},
			CurvePreferences: []tls.CurveID{tls.X25519}, MinVersion: tls.VersionTLS12}
	}
	for i := 0; i < *addrs; i++ {
		k := 2 + i // 127.0.0.2, ..., 127.0.0.254, 127.0.1.1, ...
		ip := net.IPv4(127, 0, 0, byte(k))
		if k >= 254 {
			ip = net.IPv4(127, 0, byte(k/254), byte(1+k%254))
		}
		cfg.sources = append(cfg.sources, ip)
	}
	if *total > 0 {
		cfg.budget = new(atomic.Int64)
		cfg.budget.Store(*total)
	}

	var ru0, ru1 unix.Rusage
	var start time.Time
	begin := func() {
		unix.Getrusage(unix.RUSAGE_SELF, &ru0)
		start = time.Now()
		cfg.stop = start.Add(*dur)
		if cfg.budget != nil {
			cfg.stop = start.Add(24 * time.Hour)
		}
		cfg.hardStop = cfg.stop.Add(*timeout)
	}
	// Keep-alive connections are opened before the clock starts: the rate
	// is of requests on open connections, not of dials.
	cfg.stop = time.Now().Add(*timeout)
	cfg.hardStop = cfg.stop
	var results []*counters
	if *engine == "epoll" {
		var err error
		results, err = runEpoll(cfg, max(1, min(*threads, *conns)), begin)
		if err != nil {
			fmt.Fprintln(os.Stderr, "loadgen:", err)
			os.Exit(1)
		}
	} else {
		results = runGo(cfg, begin)
	}
	end := time.Now()
	unix.Getrusage(unix.RUSAGE_SELF, &ru1)

	r := report{Mode: *mode, TLS: *useTLS, Conns: *conns, Addrs: *addrs, Errors: map[string]int{}}
	var h hist
	var version uint16
	for _, c := range results {
		h.merge(&c.lat)
		r.Requests += c.inWindow
		r.Total += c.total
		r.Bytes += c.bytes
		r.Non2xx += c.non2xx
		r.Failed += c.failed
		r.Dials += c.dials
		r.Resumed += c.resumed
		for k, v := range c.errs {
			r.Errors[k] += v
		}
		if c.version != 0 {
			version = c.version
		}
	}
	if version != 0 {
		r.Version = tls.VersionName(version)
	}
	r.Seconds = dur.Seconds()
	if cfg.budget != nil {
		r.Seconds = end.Sub(start).Seconds()
		r.Requests = r.Total
	}
	if r.Seconds > 0 {
		r.PerSecond = float64(r.Requests) / r.Seconds
		r.BytesPerSec = float64(r.Bytes) / end.Sub(start).Seconds()
	}
	r.P50ms, r.P90ms, r.P99ms, r.P999ms = h.quantile(0.5), h.quantile(0.9), h.quantile(0.99), h.quantile(0.999)
	r.MaxMs = float64(h.maxUS) / 1000
	r.CPUUser = tvSeconds(ru1.Utime) - tvSeconds(ru0.Utime)
	r.CPUSys = tvSeconds(ru1.Stime) - tvSeconds(ru0.Stime)
	if r.Total > 0 {
		r.CPUPerReq = (r.CPUUser + r.CPUSys) * 1e6 / float64(r.Total)
	}
	json.NewEncoder(os.Stdout).Encode(r)
}

func tvSeconds(tv unix.Timeval) float64 { return float64(tv.Sec) + float64(tv.Usec)/1e6 }

// runGo runs a goroutine a client (the engine TLS needs, and bodies of any
// framing) and returns their counters once every client has stopped.
func runGo(cfg *config, begin func()) []*counters {
	clients := make([]*client, cfg.conns)
	for i := range clients {
		clients[i] = &client{counters: newCounters(), cfg: cfg, nextSrc: i, nextPath: i}
	}
	if cfg.keep {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 128)
		for _, c := range clients {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				if err := c.dial(); err != nil {
					c.fail(err)
				}
			}()
		}
		wg.Wait()
	}
	begin()
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.run()
			c.drop()
		}()
	}
	wg.Wait()
	out := make([]*counters, len(clients))
	for i, c := range clients {
		out[i] = &c.counters
	}
	return out
}

// run loops until the deadline (or the shared budget runs out): one request
// at a time, a new connection whenever there is none.
func (c *client) run() {
	cfg := c.cfg
	for time.Now().Before(cfg.stop) {
		if cfg.budget != nil && cfg.budget.Add(-1) < 0 {
			return
		}
		t0 := time.Now()
		fresh := false
		if c.conn == nil {
			if err := c.dial(); err != nil {
				c.fail(err)
				continue
			}
			fresh = true
		}
		resp, err := c.request()
		if err != nil && cfg.keep && !fresh && resp.bytes == 0 {
			// The server closed a kept-alive connection between two
			// requests (a keep-alive limit, an idle timeout): counted,
			// and the request is tried once on a new connection.
			c.errs["closed between requests"]++
			c.drop()
			if err = c.dial(); err == nil {
				resp, err = c.request()
			}
		}
		if err != nil {
			c.fail(err)
			c.drop()
			continue
		}
		now := time.Now()
		c.lat.add(now.Sub(t0))
		c.total++
		if !now.After(cfg.stop) {
			c.inWindow++
		}
		c.bytes += resp.bytes
		if resp.status/100 != 2 {
			c.non2xx++
		}
		if !cfg.keep || resp.close {
			c.drop()
		}
	}
}

// request writes the next request on c.conn and reads its whole response.
func (c *client) request() (response, error) {
	cfg := c.cfg
	dl := time.Now().Add(cfg.timeout)
	if dl.After(cfg.hardStop) {
		dl = cfg.hardStop
	}
	c.conn.SetDeadline(dl)
	req := cfg.reqs[c.nextPath%len(cfg.reqs)]
	c.nextPath++
	if _, err := c.conn.Write(req); err != nil {
		return response{}, err
	}
	return readResponse(c.rd)
}

// dial opens c's next connection from its next source address, with the
// TLS handshake when asked.
func (c *client) dial() error {
	cfg := c.cfg
	src := cfg.sources[c.nextSrc%len(cfg.sources)]
	c.nextSrc += cfg.conns
	d := net.Dialer{Timeout: cfg.timeout, LocalAddr: &net.TCPAddr{IP: src}, Control: bindNoPort}
	nc, err := d.Dial("tcp", cfg.addr)
	c.dials++
	if err != nil {
		return err
	}
	if cfg.tls != nil {
		nc.SetDeadline(time.Now().Add(cfg.timeout))
		tc := tls.Client(nc, cfg.tls)
		if err := tc.Handshake(); err != nil {
			nc.Close()
			return err
		}
		st := tc.ConnectionState()
		if st.DidResume {
			c.resumed++
		}
		c.version = st.Version
		c.conn = &tlsConn{Conn: tc, raw: nc}
	} else {
		c.conn = nc
	}
	if c.rd == nil {
		c.rd = bufio.NewReaderSize(c.conn, 16<<10)
	} else {
		c.rd.Reset(c.conn)
	}
	return nil
}

// tlsConn closes the TCP connection without a close_notify alert, as the
// handshake tool does: one write fewer a connection, for every server alike.
type tlsConn struct {
	*tls.Conn
	raw net.Conn
}

func (t *tlsConn) Close() error { return t.raw.Close() }

func (c *client) drop() {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

func (c *client) fail(err error) {
	c.failed++
	c.errs[errkind.Of(err)]++
	// a server refusing connections would otherwise be hammered by a
	// loop that spends the client's CPU on failures
	time.Sleep(time.Millisecond)
}

// bindNoPort sets IP_BIND_ADDRESS_NO_PORT: the bind to the source address
// leaves the port to connect, which picks one unique per destination, so
// the addresses do not share one ephemeral range among all connections.
func bindNoPort(network, address string, rc syscall.RawConn) error {
	var serr error
	err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1)
	})
	return errors.Join(err, serr)
}
