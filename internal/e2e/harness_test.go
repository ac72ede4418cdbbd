package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/supervisor"
	"github.com/gatehouse-dev/gatehouse/supervisor/view"
	"github.com/hashicorp/go-hclog"
)

// harness is one running supervisor with its worker processes.
type harness struct {
	t    testing.TB
	sup  *supervisor.Supervisor
	addr string // "127.0.0.1:port" of the first listener
	logs *logBuffer
	done chan error
	// config is the configuration file, relative paths resolving against
	// its directory; Reload reads it again.
	config string
	// accessLog is the access log's file when the test's configuration
	// names none (start sends it there rather than to standard error).
	accessLog string
	// deaths is how many workers the test kills on purpose (expectDeaths).
	deaths int
	// stopped: the test stopped the supervisor itself (shutdown), whose
	// counters can no longer be read at the end.
	stopped bool
}

// baseConfig is prepended to every test's configuration: one listener on an
// ephemeral port and small pools so that caps are reached quickly.
const baseConfig = `
listener "http" {
  address = "127.0.0.1:0"
}
`

// start runs a supervisor for body (HCL appended to baseConfig) and waits
// until every worker is ready. The test binary is the worker program.
func start(tb testing.TB, body string, workerArgs ...string) *harness {
	tb.Helper()
	h := startNoWait(tb, body, workerArgs...)
	select {
	case <-h.sup.Ready():
	case err := <-h.done:
		tb.Fatalf("supervisor stopped before ready: %v\n%s", err, h.logs.String())
	case <-time.After(20 * time.Second):
		tb.Fatalf("workers not ready within 20s\n%s", h.logs.String())
	}
	return h
}

// startNoWait is start without waiting for the workers.
func startNoWait(tb testing.TB, body string, workerArgs ...string) *harness {
	tb.Helper()
	dir := workerReadableTempDir(tb)
	src := baseConfig + body
	if !strings.Contains(body, "route ") {
		src += defaultRoutes(tb, dir)
	}
	path := filepath.Join(dir, "test.hcl")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		tb.Fatal(err)
	}
	cfg, err := config.Parse([]byte(src), path, config.ParseOptions{BaseDir: dir, Handlers: testHandlerNames()})
	if err != nil {
		tb.Fatalf("config: %v\n%s", err, src)
	}
	// The access log goes to a file of the test's, not to the test
	// binary's standard error: a flood of lines there would bury the
	// failure that go test prints at the end. A failing test shows its tail.
	accessLog := ""
	if cfg.Log.AccessLog && cfg.Log.AccessLogPath == "" {
		accessLog = filepath.Join(dir, "access.log")
		cfg.Log.AccessLogPath = accessLog
	}
	logs := &logBuffer{}
	log := hclog.New(&hclog.LoggerOptions{Name: "gatehouse", Output: logs, Level: hclog.Info})
	if len(workerArgs) == 0 {
		workerArgs = []string{"worker"}
	}
	sup, err := supervisor.New(cfg, supervisor.Options{Logger: log, WorkerArgs: workerArgs, ConfigPath: path, Handlers: testHandlerNames(), KeepRoot: true})
	if err != nil {
		tb.Fatalf("supervisor.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{t: tb, sup: sup, addr: sup.Addrs()[0].String(), logs: logs, done: make(chan error, 1), config: path, accessLog: accessLog}
	go func() { h.done <- sup.Run(ctx) }()
	tb.Cleanup(func() {
		h.checkDeaths()
		cancel()
		select {
		case err := <-h.done:
			if err != nil {
				tb.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			tb.Errorf("supervisor did not stop within 30s")
		}
		if tb.Failed() {
			tb.Logf("supervisor log:\n%s", logs.String())
			if accessLog != "" {
				tb.Logf("access log, its last lines:\n%s", tail(accessLog, 40))
			}
		}
	})
	return h
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.SplitAfter(string(b), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "")
}

// workerReadableTempDir is a temporary directory the workers' unprivileged
// account can search: testing's own are mode 0700.
func workerReadableTempDir(tb testing.TB) string {
	dir := tb.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			tb.Fatal(err)
		}
	}
	return dir
}

// defaultRoutes writes a small document root and returns routes for it.
func defaultRoutes(tb testing.TB, dir string) string {
	www := filepath.Join(dir, "www")
	if err := os.MkdirAll(www, 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(www, "index.html"), []byte("<h1>hello</h1>\n"), 0o644); err != nil {
		tb.Fatal(err)
	}
	return `
route "/" {
  static {
    root = "` + www + `"
  }
}
route "/ok" {
  respond {
    status = 200
    body   = "ok\n"
  }
}
route "/a" {
  respond {
    body = "A"
  }
}
route "/b" {
  respond {
    body = "B"
  }
}
route "/c" {
  respond {
    body = "C"
  }
}
`
}

func (h *harness) snapshot() view.Snapshot {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := h.sup.Snapshot(ctx)
	if err != nil {
		h.t.Fatalf("snapshot: %v", err)
	}
	return s
}

// waitFor polls the supervisor's snapshot until cond holds, at most limit.
func (h *harness) waitFor(what string, limit time.Duration, cond func(view.Snapshot) bool) view.Snapshot {
	h.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		s := h.snapshot()
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out after %v waiting for %s; snapshot: %+v", limit, what, s)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// dialFrom connects to addr from the loopback address src ("127.0.0.2").
func dialFrom(tb testing.TB, src, addr string) *net.TCPConn {
	tb.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		tb.Fatalf("dial from %s: %v", src, err)
	}
	return c.(*net.TCPConn)
}

// client is one keep-alive connection that sends requests and reads responses.
type client struct {
	c  *net.TCPConn
	br *bufio.Reader
}

func newClient(tb testing.TB, src, addr string) *client {
	c := dialFrom(tb, src, addr)
	tb.Cleanup(func() { c.Close() })
	return &client{c: c, br: bufio.NewReader(c)}
}

// get sends one GET and reads its response, under a 10 s deadline.
func (cl *client) get(path string) (*http.Response, string, error) {
	cl.c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(cl.c, "GET %s HTTP/1.1\r\nHost: test\r\n\r\n", path); err != nil {
		return nil, "", err
	}
	return readResponse(cl.br, "GET")
}

func readResponse(br *bufio.Reader, method string) (*http.Response, string, error) {
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b), err
}

// logBuffer collects the supervisor's log for failing tests.
type logBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buf.Len() < 4<<20 {
		l.buf.Write(p)
	}
	return len(p), nil
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// expectClosed reports whether c is closed by the server within limit.
func expectClosed(c net.Conn, limit time.Duration) error {
	c.SetReadDeadline(time.Now().Add(limit))
	var b [512]byte
	for {
		_, err := c.Read(b[:])
		if err == nil {
			continue
		}
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return fmt.Errorf("still open after %v", limit)
		}
		return nil
	}
}
