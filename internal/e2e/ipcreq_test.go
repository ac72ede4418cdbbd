package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/view"
	"golang.org/x/sys/unix"
)

// Worker requests (docs/DESIGN.md §4.2): the hostile worker's request modes against a
// supervisor whose second worker keeps serving clients.

// requestConfig configures the upstream and rate limit class the hostile
// request modes name; upstream is the "app" upstream's address.
func requestConfig(upstream string, extra string) string {
	return `
workers {
  count       = 2
  concurrency = 4
}
log {
  access_log = false
}
upstream "` + hostileUpstream + `" {
  addresses       = ["` + upstream + `"]
  connect_timeout = "10s"
  max_connections = 65535
}
rate_limit "` + hostileClass + `" {
  prefix = "/login"
  rate   = 20
  per    = "60s"
  burst  = 5
}
route "/ok" {
  respond {
    body = "ok\n"
  }
}
` + extra
}

// acceptAndClose is an upstream that accepts connections and closes them at
// once. It returns its address.
func acceptAndClose(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l.Addr().String()
}

// hangingUpstream is an address whose connects hang: a listening socket with
// a backlog of 1 that never accepts, its accept queue filled first, so that
// the kernel drops later SYNs and a dial ends only at its timeout. It
// returns the address and its port.
func hangingUpstream(tb testing.TB) (string, int) {
	tb.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		tb.Fatal(err)
	}
	if err := unix.Listen(fd, 1); err != nil {
		tb.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		tb.Fatal(err)
	}
	port := sa.(*unix.SockaddrInet4).Port
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	// Fill the accept queue (backlog+1 connections); the rest time out.
	for i := 0; i < 3; i++ {
		if c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond); err == nil {
			tb.Cleanup(func() { c.Close() })
		}
	}
	if c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond); err == nil {
		c.Close()
		tb.Skip("cannot make a connect hang: the kernel accepted past the backlog")
	}
	return addr, port
}

// synSent counts this process's network namespace's sockets in SYN_SENT to
// 127.0.0.1:port: the supervisor's dials in progress to a hanging upstream.
// It reads through buf and allocates nothing else, so that sampling it does
// not inflate the heap the flood test measures.
func synSent(tb testing.TB, port int, buf []byte) int {
	f, err := os.Open("/proc/self/net/tcp")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	// A line: "sl local_address rem_address st ...".
	want := []byte(fmt.Sprintf(" 0100007F:%04X 02 ", port))
	n, rest := 0, 0
	for {
		m, err := f.Read(buf[rest:])
		data := buf[:rest+m]
		for {
			i := bytes.IndexByte(data, '\n')
			if i < 0 {
				break
			}
			if bytes.Contains(data[:i], want) {
				n++
			}
			data = data[i+1:]
		}
		rest = copy(buf, data)
		if err != nil || m == 0 {
			return n
		}
	}
}

// clientLoop sends GET /ok from 127.0.0.1 over n keep-alive connections until
// stopped, reconnecting after a response that closes. It records the time of
// every response whose body is "ok\n" (served by a real worker); every
// response must be a 200.
type clientLoop struct {
	t    testing.TB
	stop chan struct{}
	wg   sync.WaitGroup

	mu     sync.Mutex
	ok     []time.Time // responses from a real worker
	canned int         // responses from a hostile worker it was dispatched to
	errs   []string
}

func startClientLoop(t testing.TB, addr string, n int) *clientLoop {
	l := &clientLoop{t: t, stop: make(chan struct{})}
	for i := 0; i < n; i++ {
		l.wg.Add(1)
		go l.run(addr)
	}
	t.Cleanup(l.halt)
	return l
}

func (l *clientLoop) run(addr string) {
	defer l.wg.Done()
	var c net.Conn
	var br *bufio.Reader
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	for i := 0; ; i++ {
		select {
		case <-l.stop:
			return
		default:
		}
		if c == nil {
			var err error
			c, err = net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				l.fail(fmt.Sprintf("dial: %v", err))
				return
			}
			br = bufio.NewReader(c)
		}
		c.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := fmt.Fprintf(c, "GET /ok HTTP/1.1\r\nHost: test\r\n\r\n"); err != nil {
			l.fail(fmt.Sprintf("request %d: %v", i, err))
			return
		}
		resp, body, err := readResponse(br, "GET")
		switch {
		case err != nil:
			l.fail(fmt.Sprintf("request %d: %v", i, err))
			return
		case resp.StatusCode != 200:
			l.fail(fmt.Sprintf("request %d: status %d, body %q", i, resp.StatusCode, body))
			return
		}
		l.mu.Lock()
		if body == cannedBody {
			l.canned++
		} else {
			l.ok = append(l.ok, time.Now())
		}
		l.mu.Unlock()
		if resp.Close {
			c.Close()
			c = nil
		}
		time.Sleep(time.Millisecond)
	}
}

func (l *clientLoop) fail(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, s)
}

// halt stops the loop and reports its failures.
func (l *clientLoop) halt() {
	select {
	case <-l.stop:
		return
	default:
	}
	close(l.stop)
	l.wg.Wait()
	for _, e := range l.errs {
		l.t.Errorf("client loop: %s", e)
	}
}

// served counts responses from a real worker between from and to.
func (l *clientLoop) served(from, to time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, at := range l.ok {
		if !at.Before(from) && !at.After(to) {
			n++
		}
	}
	return n
}

// waitLog waits for a log line containing s and returns it.
func (h *harness) waitLog(s string, limit time.Duration) string {
	h.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		logs := h.logs.String()
		if i := strings.Index(logs, s); i >= 0 {
			line := logs[i:]
			if j := strings.IndexByte(line, '\n'); j >= 0 {
				return line[:j]
			}
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("no log line %q within %v", s, limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// logInt returns the integer key=N in line.
func logInt(tb testing.TB, line, key string) int {
	tb.Helper()
	m := regexp.MustCompile(`\b` + key + `=(\d+)`).FindStringSubmatch(line)
	if m == nil {
		tb.Fatalf("no %s= in %q", key, line)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// counter returns a snapshot counter, failing if the snapshot lacks it.
func counter(tb testing.TB, s view.Snapshot, key string) uint64 {
	tb.Helper()
	v, ok := s.Counters[key]
	if !ok {
		tb.Fatalf("snapshot has no counter %q", key)
	}
	return v
}

// A worker that breaks the request rules is killed and replaced, the
// supervisor stays up and the other worker's clients are served throughout.
func TestHostileWorkerRequestsAreKilled(t *testing.T) {
	reasons := map[string]string{
		"request-descriptor":   "*proto.Frame_Dial carries 1 descriptors, want 0",
		"unknown-upstream":     `Dial for "nowhere", which is no configured upstream`,
		"release-unheld":       `releases an upstream connection to "app" it does not hold`,
		"reclaimed-unasked":    `Reclaimed "app" without a Reclaim`,
		"ratecheck-foreign":    "RateCheck for connection 424242 it does not hold",
		"request-before-ready": "Dial while starting",
	}
	for _, mode := range []string{"request-descriptor", "unknown-upstream", "release-unheld", "reclaimed-unasked", "ratecheck-foreign", "request-before-ready"} {
		t.Run(mode, func(t *testing.T) {
			h := startNoWait(t, requestConfig(acceptAndClose(t), ""), "hostile-worker", mode)
			h.expectDeaths(1)
			h.waitFor("the well-behaved worker", 20*time.Second, func(s view.Snapshot) bool {
				return s.Workers[1].State == "ready"
			})
			loop := startClientLoop(t, h.addr, 2)
			h.waitFor("the hostile worker to be killed and throttled", 20*time.Second, func(s view.Snapshot) bool {
				return s.Workers[0].Restarts >= 1 && s.Workers[0].Backoff == time.Minute
			})
			// Keep the clients going a while after the kill.
			killed := time.Now()
			time.Sleep(300 * time.Millisecond)
			loop.halt()
			if n := loop.served(killed, time.Now()); n < 20 {
				t.Errorf("the well-behaved worker served %d requests in the 300ms after the kill, want >= 20", n)
			}
			s := h.snapshot()
			if s.Workers[1].Restarts != 0 {
				t.Errorf("the well-behaved worker was restarted %d times", s.Workers[1].Restarts)
			}
			if got := counter(t, s, "worker_kills"); got != 1 {
				t.Errorf("worker_kills = %d, want 1", got)
			}
			// hclog quotes the reason: compare without its escapes.
			line := strings.ReplaceAll(h.waitLog("killing worker", time.Second), `\"`, `"`)
			if !strings.Contains(line, reasons[mode]) {
				t.Errorf("kill log line %q does not give the reason %q", line, reasons[mode])
			}
		})
	}
}

// A worker that sends 100 000 Dials without reading a reply is answered
// Overloaded beyond the in-flight cap: the supervisor never starts more than
// the cap, answers every request exactly once, stays within a memory bound,
// and keeps serving the other worker's clients.
func TestHostileWorkerFlood(t *testing.T) {
	const (
		inFlightCap = 256
		// heapBound is the most the test process's (the supervisor's) Go
		// heap may grow during the flood. The reader holds at most one
		// batch of frames, the cap's dials and a reply queue bounded by
		// them: well under a megabyte live. HeapAlloc also counts garbage
		// not yet collected, up to the GC's minimum 4 MiB goal; measured,
		// the heap peaks about 2 MiB over its start.
		heapBound      = 16 << 20
		connectTimeout = 10 * time.Second
	)
	upstream, port := hangingUpstream(t)
	h := startNoWait(t, requestConfig(upstream, fmt.Sprintf(`
limits {
  ipc_max_in_flight_requests = %d
}
`, inFlightCap)), "hostile-worker", "flood")
	h.waitFor("the well-behaved worker", 20*time.Second, func(s view.Snapshot) bool {
		return s.Workers[1].State == "ready"
	})
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	baseHeap := ms.HeapAlloc

	// Sample the supervisor while the hostile worker floods: its heap and
	// its dials in progress, as the kernel sees them (sockets in SYN_SENT to
	// the upstream). /proc/net/tcp is no snapshot: a dial ending while it is
	// read and another starting in its place may both be counted. So a
	// count holds only if no dial ended during the read (the address's
	// failures unchanged across it): then every socket counted still held
	// its in-flight slot at the end.
	type sample struct {
		heap    uint64
		dialing int // -1 when a dial ended during the read
	}
	var (
		smu     sync.Mutex
		samples []sample
	)
	failures := func(s view.Snapshot) uint64 {
		return upstreamOf(t, s, hostileUpstream).Addresses[0].Failures
	}
	procBuf := make([]byte, 64<<10)
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stopSampling:
				return
			case <-time.After(50 * time.Millisecond):
			}
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			before := failures(h.snapshot())
			n := synSent(t, port, procBuf)
			if failures(h.snapshot()) != before {
				n = -1
			}
			smu.Lock()
			samples = append(samples, sample{ms.HeapAlloc, n})
			smu.Unlock()
		}
	}()
	loop := startClientLoop(t, h.addr, 4)

	// While the hostile worker reads nothing: the cap's dials start, the
	// requests over it are answered Overloaded at once, and the other
	// worker's clients are served. Then the test lets it read.
	h.waitLog("hostile: flood started", 20*time.Second)
	stallStart := time.Now()
	var stalled view.Snapshot
	for deadline := time.Now().Add(floodStallMax - time.Second); ; {
		stalled = h.snapshot()
		if upstreamOf(t, stalled, hostileUpstream).Dialing == inFlightCap && stalled.Counters["ipc_overloaded"] > 0 &&
			loop.served(stallStart, time.Now()) >= 50 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	stallServed := loop.served(stallStart, time.Now())
	if err := syscall.Kill(stalled.Workers[0].PID, floodRead); err != nil {
		t.Fatalf("signalling the hostile worker: %v", err)
	}
	reading := h.waitLog("hostile: flood reading", 20*time.Second)
	if !strings.Contains(reading, "signaled=true") {
		t.Fatalf("the hostile worker read before the test let it: %s", reading)
	}
	done := h.waitLog("hostile: flood done", 2*connectTimeout+30*time.Second)
	elapsed := time.Since(stallStart)
	close(stopSampling)
	<-sampled
	loop.halt()
	t.Logf("%s; %s; %v", reading, done, elapsed)

	stallOverloaded := stalled.Counters["ipc_overloaded"]
	if n := upstreamOf(t, stalled, hostileUpstream).Dialing; n != inFlightCap {
		t.Errorf("%d dials started while the hostile worker did not read, want the cap %d", n, inFlightCap)
	}
	if stallOverloaded == 0 {
		t.Errorf("no Overloaded reply while the hostile worker did not read")
	}
	// The other worker's clients were served while the flood stalled the
	// hostile worker's channel.
	if stallServed < 50 {
		t.Errorf("the well-behaved worker served %d requests during the stall, want >= 50", stallServed)
	}
	smu.Lock()
	var maxHeap uint64
	maxDialing, valid := 0, 0
	for _, s := range samples {
		maxHeap = max(maxHeap, s.heap)
		if s.dialing >= 0 {
			valid++
			maxDialing = max(maxDialing, s.dialing)
		}
	}
	smu.Unlock()
	t.Logf("heap %d KiB at start, at most %d KiB; at most %d dials in progress; %d Overloaded during the stall; %d samples, %d counting dials",
		baseHeap>>10, maxHeap>>10, maxDialing, stallOverloaded, len(samples), valid)
	if maxHeap > baseHeap+heapBound {
		t.Errorf("heap grew from %d to %d bytes, more than the bound of %d", baseHeap, maxHeap, heapBound)
	}
	// The dials in progress are the requests started: never more than the
	// cap, and the cap was reached (else the upstream did not hang).
	if maxDialing > inFlightCap {
		t.Errorf("%d dials in progress at once, over the in-flight cap %d", maxDialing, inFlightCap)
	}
	if maxDialing < inFlightCap {
		t.Errorf("at most %d dials in progress, want the cap %d: the flood did not fill it", maxDialing, inFlightCap)
	}

	// Every request was answered exactly once: Overloaded, or a dial reply
	// (each a timeout, since the upstream hangs). Each started dial holds
	// its slot for connectTimeout, so at most cap dials start per period.
	overloaded, dials := logInt(t, done, "overloaded"), logInt(t, done, "dials")
	if n := logInt(t, done, "strange"); n != 0 {
		t.Errorf("%d replies with an unknown or repeated id, or of an unexpected type", n)
	}
	if overloaded+dials != floodRequests {
		t.Errorf("overloaded %d + dial replies %d = %d, want %d", overloaded, dials, overloaded+dials, floodRequests)
	}
	if to := logInt(t, done, "timed_out"); to != dials {
		t.Errorf("%d of %d dial replies timed out, want all", to, dials)
	}
	periods := 1 + int(elapsed/connectTimeout)
	if dials > inFlightCap*periods {
		t.Errorf("%d dials started in %v, more than the cap %d per %v", dials, elapsed, inFlightCap, connectTimeout)
	}
	s := h.snapshot()
	if got := counter(t, s, "ipc_overloaded"); got != uint64(overloaded) {
		t.Errorf("ipc_overloaded = %d, the hostile worker counted %d Overloaded replies", got, overloaded)
	}
	if got := counter(t, s, "upstream_errors"); got != uint64(dials) {
		t.Errorf("upstream_errors = %d, want %d (every dial timed out)", got, dials)
	}
	if got := counter(t, s, "worker_kills"); got != 0 {
		t.Errorf("worker_kills = %d: flooding within the protocol is answered, not killed", got)
	}
	if s.Workers[1].Restarts != 0 {
		t.Errorf("the well-behaved worker was restarted %d times", s.Workers[1].Restarts)
	}
}

// The admission reproducer (docs/DESIGN.md §2.6): exactly
// cap lanes over one channel, each waiting for its reply before it sends
// its next request, are never refused, since at most cap requests are ever
// outstanding and a slot is free again before its reply is written.
func TestAdmissionLanes(t *testing.T) {
	h := start(t, fmt.Sprintf(`
workers {
  count = 1
}
log {
  access_log = false
}
limits {
  ipc_max_in_flight_requests = %d
}
upstream %q {
  addresses       = [%q]
  max_connections = %d
}
route "/ok" {
  respond {}
}
`, lanesCap, hostileUpstream, acceptAndClose(t), 2*lanesCap), "hostile-worker", "lanes")
	done := h.waitLog("hostile: lanes done", 60*time.Second)
	t.Log(done)
	if n := logInt(t, done, "overloaded"); n != 0 {
		t.Errorf("%d Overloaded replies to %d lanes sending sequentially under a cap of %d, want 0", n, lanesCap, lanesCap)
	}
	if n := logInt(t, done, "ok"); n != lanesRequests {
		t.Errorf("%d successful dials, want %d", n, lanesRequests)
	}
	s := h.snapshot()
	if got := counter(t, s, "ipc_overloaded"); got != 0 {
		t.Errorf("ipc_overloaded = %d, want 0", got)
	}
	if got := counter(t, s, "upstream_refused"); got != 0 {
		t.Errorf("upstream_refused = %d, want 0 (at most %d held)", got, lanesCap)
	}
	if got := counter(t, s, "worker_kills"); got != 0 {
		t.Errorf("worker_kills = %d, want 0", got)
	}
}
