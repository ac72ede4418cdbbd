package e2e

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// proc is the real gatehouse command running as a child of the test.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	addr   string
	mu     sync.Mutex
	stderr strings.Builder
	deaths int // workers the test kills on purpose (expectDeaths); guarded by mu
	exited chan struct{}
	err    error
}

var listeningRE = regexp.MustCompile(`listening: address=(\S+)`)

// startBinary runs the gatehouse binary in dir with args; when nofile > 0 it
// runs under `ulimit -n nofile`. It waits for the first "listening" line.
func startBinary(t *testing.T, dir string, nofile int, args ...string) *proc {
	t.Helper()
	return startOps(t, dir, opsOptions{args: args, nofile: nofile})
}

func (p *proc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// waitServing polls until path answers 200, at most 20 s.
func (p *proc) waitServing(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", p.addr, time.Second)
		if err == nil {
			c.SetDeadline(time.Now().Add(2 * time.Second))
			fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path)
			resp, _, err := readResponse(bufio.NewReader(c), "GET")
			c.Close()
			if err == nil && resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("gatehouse does not serve %s\n%s", path, p.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// workerPIDs lists the gatehouse process's workers: its children, or the
// children of its spawner when started as root.
func (p *proc) workerPIDs(t *testing.T) []int {
	t.Helper()
	var pids []int
	for _, c := range childPIDs(p.cmd.Process.Pid) {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", c))
		if strings.Contains(string(cmdline), "\x00spawner") {
			pids = append(pids, childPIDs(c)...)
			continue
		}
		if strings.Contains(string(cmdline), "\x00upgrade-launcher") {
			continue // a root start's upgrade launcher, no worker
		}
		pids = append(pids, c)
	}
	return pids
}

// spawnerPID is the gatehouse process's spawner, or 0.
func (p *proc) spawnerPID() int {
	for _, c := range childPIDs(p.cmd.Process.Pid) {
		if cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", c)); strings.Contains(string(cmdline), "\x00spawner") {
			return c
		}
	}
	return 0
}

// childPIDs lists pid's children.
func childPIDs(pid int) []int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var pids []int
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, s := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(s); err == nil {
				pids = append(pids, n)
			}
		}
	}
	return pids
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// cpuTicks is the process's user+system CPU time in clock ticks.
func cpuTicks(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.Atoi(f[11])
	st, _ := strconv.Atoi(f[12])
	return ut + st
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "examples", "gatehouse.hcl")); err != nil {
		t.Fatalf("repository root not found: %v", err)
	}
	return root
}

// `make run` serves the example site on 127.0.0.1:8080: the command it runs,
// from the repository root, with three requests on one connection.
func TestMakeRunServesExampleSite(t *testing.T) {
	p := startBinary(t, repoRoot(t), 0, "-config", "examples/gatehouse.hcl")
	if p.addr != "127.0.0.1:8080" {
		t.Fatalf("listening on %s, want 127.0.0.1:8080", p.addr)
	}
	p.waitServing(t, "/healthz")
	cl := newClient(t, "127.0.0.1", p.addr)
	want := []struct{ path, ctype, contains string }{
		{"/", "text/html; charset=utf-8", "<h1>gatehouse</h1>"},
		{"/style.css", "text/css; charset=utf-8", "body"},
		{"/gate.png", "image/png", "PNG"},
	}
	for _, w := range want {
		resp, body, err := cl.get(w.path)
		if err != nil {
			t.Fatalf("%s on the kept-alive connection: %v", w.path, err)
		}
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != w.ctype || !strings.Contains(body, w.contains) {
			t.Errorf("%s: status %d, type %q, body %.40q", w.path, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		if p.err != nil {
			t.Errorf("exit after SIGTERM: %v", p.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no exit within 15s of SIGTERM")
	}
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	dir := workerReadableTempDir(t)
	os.MkdirAll(filepath.Join(dir, "www"), 0o755)
	os.WriteFile(filepath.Join(dir, "www", "index.html"), []byte("hi\n"), 0o644)
	src := `
listener "http" {
  address = "127.0.0.1:0"
}
route "/" {
  static {
    root = "www"
  }
}
route "/ok" {
  respond {
    body = "ok\n"
  }
}
` + body
	if err := os.WriteFile(filepath.Join(dir, "gatehouse.hcl"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Shutdown with 1000 parked connections ends within the grace period and
// leaves no worker process behind.
func TestShutdownWithParkedConnections(t *testing.T) {
	dir := writeConfig(t, `
limits {
  shutdown_grace = "5s"
}
route "/metrics" {
  metrics {
    allow = ["127.0.0.0/8"]
  }
}
`)
	p := startBinary(t, dir, 0, "-config", "gatehouse.hcl")
	p.waitServing(t, "/ok")
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < 500; i++ { // idle after one request
		cl := newClient(t, fmt.Sprintf("127.0.0.%d", 2+i%4), p.addr)
		if resp, _, err := cl.get("/ok"); err != nil || resp.StatusCode != 200 {
			t.Fatalf("request %d: %v", i, err)
		}
		conns = append(conns, cl.c)
	}
	for i := 0; i < 500; i++ { // no byte yet
		conns = append(conns, dialFrom(t, fmt.Sprintf("127.0.0.%d", 10+i%4), p.addr))
	}
	// The listener defers accept (TCP_DEFER_ACCEPT): the kernel queues a
	// connection that sent nothing after about a second, and only then is
	// it the supervisor's to park (and close at shutdown).
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, body, err := newClient(t, "127.0.0.1", p.addr).get("/metrics")
		if err == nil && strings.Contains(body, "gatehouse_connections{state=\"fresh\"} 500\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the 500 silent connections were not all accepted within 15s")
		}
	}
	workers := p.workerPIDs(t)
	if len(workers) != 4 {
		t.Fatalf("found %d worker processes, want 4", len(workers))
	}
	began := time.Now()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(5*time.Second + 10*time.Second):
		t.Fatalf("still running 10s past the 5s grace")
	}
	if p.err != nil {
		t.Errorf("exit status after SIGTERM: %v", p.err)
	}
	t.Logf("shutdown with %d parked connections took %v", len(conns), time.Since(began))
	for _, pid := range workers {
		if alive(pid) {
			t.Errorf("worker %d outlived the supervisor", pid)
		}
	}
	for i, c := range conns {
		if err := expectClosed(c, 5*time.Second); err != nil {
			t.Fatalf("parked connection %d: %v", i, err)
		}
	}
}

// Descriptor exhaustion: under a small descriptor limit the oldest idle
// kept-alive connections make room for new clients, and when nothing can be
// closed accepting pauses instead of spinning.
func TestDescriptorExhaustion(t *testing.T) {
	dir := writeConfig(t, `
workers {
  count       = 1
  concurrency = 4
}
limits {
  first_byte_timeout = "60s"
  keep_alive_idle_timeout = "300s"
}
`)
	p := startBinary(t, dir, 256, "-config", "gatehouse.hcl")
	p.waitServing(t, "/ok")
	var idle []*client
	for i := 0; i < 240; i++ {
		cl := newClient(t, fmt.Sprintf("127.0.0.%d", 2+i%4), p.addr)
		if resp, _, err := cl.get("/ok"); err != nil || resp.StatusCode != 200 {
			t.Fatalf("idle connection %d: %v", i, err)
		}
		idle = append(idle, cl)
	}
	for i := 0; i < 100; i++ {
		cl := newClient(t, "127.0.0.20", p.addr)
		if resp, _, err := cl.get("/ok"); err != nil || resp.StatusCode != 200 {
			t.Fatalf("new client %d with descriptors short: %v", i, err)
		}
		cl.c.Close()
	}
	// The first idle connections were the ones closed.
	if err := expectClosed(idle[0].c, 5*time.Second); err != nil {
		t.Errorf("oldest idle connection: %v", err)
	}
	if resp, _, err := idle[len(idle)-1].get("/ok"); err != nil || resp.StatusCode != 200 {
		t.Errorf("newest idle connection was closed before older ones: %v", err)
	}
	// Fill every descriptor with connections that cannot be closed early
	// (no byte yet, long first-byte timeout): accepting must pause, not spin.
	var silent []net.Conn
	for i := 0; i < 400; i++ {
		d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(1+i%200))}}
		c, err := d.Dial("tcp", p.addr)
		if err != nil {
			break // the backlog is full: fine
		}
		silent = append(silent, c)
	}
	defer func() {
		for _, c := range silent {
			c.Close()
		}
	}()
	time.Sleep(500 * time.Millisecond)
	pid := p.cmd.Process.Pid
	before := cpuTicks(t, pid)
	time.Sleep(2 * time.Second)
	used := cpuTicks(t, pid) - before
	// 2 s of a spinning loop is ~200 ticks; a paused one a handful.
	if used > 50 {
		t.Errorf("supervisor used %d CPU ticks in 2s with descriptors exhausted: the accept loop spins", used)
	}
	t.Logf("supervisor CPU while exhausted: %d ticks in 2s", used)
	select {
	case <-p.exited:
		t.Fatalf("gatehouse exited under descriptor exhaustion: %v", p.err)
	default:
	}
}
