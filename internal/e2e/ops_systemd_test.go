package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// notifySocket is a unixgram socket standing in for systemd's NOTIFY_SOCKET.
type notifySocket struct {
	path string
	c    *net.UnixConn
	msgs chan string

	mu  sync.Mutex
	all []string // every datagram, in order
}

func newNotifySocket(t *testing.T) *notifySocket {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	n := &notifySocket{path: path, c: c, msgs: make(chan string, 1024)}
	go func() {
		buf := make([]byte, 4096)
		for {
			k, err := c.Read(buf)
			if err != nil {
				close(n.msgs)
				return
			}
			m := string(buf[:k])
			n.mu.Lock()
			n.all = append(n.all, m)
			n.mu.Unlock()
			n.msgs <- m
		}
	}()
	t.Cleanup(func() { c.Close() })
	return n
}

// hasLine reports whether the datagram m holds the assignment line.
func hasLine(m, line string) bool {
	for _, l := range strings.Split(m, "\n") {
		if l == line {
			return true
		}
	}
	return false
}

// expect skips datagrams until one holds line, and returns it.
func (n *notifySocket) expect(t *testing.T, line string, limit time.Duration) string {
	t.Helper()
	deadline := time.After(limit)
	for {
		select {
		case m, ok := <-n.msgs:
			if !ok {
				t.Fatalf("notify socket closed before %s", line)
			}
			if hasLine(m, line) {
				return m
			}
		case <-deadline:
			t.Fatalf("no %s within %v; received %q", line, limit, n.history())
		}
	}
}

// count counts datagrams holding line received during d.
func (n *notifySocket) count(line string, d time.Duration) int {
	k := 0
	deadline := time.After(d)
	for {
		select {
		case m := <-n.msgs:
			if hasLine(m, line) {
				k++
			}
		case <-deadline:
			return k
		}
	}
}

func (n *notifySocket) history() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.all...)
}

// statusOf returns the STATUS= value of a datagram.
func statusOf(m string) string {
	for _, l := range strings.Split(m, "\n") {
		if s, ok := strings.CutPrefix(l, "STATUS="); ok {
			return s
		}
	}
	return ""
}

// The sd_notify protocol over a real unixgram socket: READY=1 only once the
// listener serves (the first request, sent right after READY, is answered),
// STATUS=, WATCHDOG=1 at half of WATCHDOG_USEC, RELOADING=1 then READY=1
// around SIGHUP, STOPPING=1 on SIGTERM and exit 0.
func TestOpsSystemdNotify(t *testing.T) {
	dir := writeOpsConfig(t, "127.0.0.1:0", "workers {\n  count = 2\n}\n")
	ns := newNotifySocket(t)
	p := startOps(t, dir, opsOptions{
		args: []string{"-config", "gatehouse.hcl"},
		env:  []string{"NOTIFY_SOCKET=" + ns.path, "WATCHDOG_USEC=400000"},
	})
	ready := ns.expect(t, "READY=1", 20*time.Second)
	// One attempt, no retry: READY means serving.
	if code, body := opsGet(t, p.addr, "/ok"); code != 200 || body != "ok\n" {
		t.Fatalf("first request after READY=1: %d %q", code, body)
	}
	for _, m := range ns.history() {
		if m == ready {
			break
		}
		if hasLine(m, "READY=1") {
			t.Fatalf("READY=1 sent twice at startup: %q", ns.history())
		}
	}
	if st := statusOf(ready); !strings.HasPrefix(st, "serving on "+p.addr) || !strings.Contains(st, "2 workers") {
		t.Errorf("STATUS with READY=1: %q, want \"serving on %s, 2 workers, ...\"", st, p.addr)
	}

	// 400 ms watchdog: a ping every 200 ms.
	if k := ns.count("WATCHDOG=1", 1500*time.Millisecond); k < 4 {
		t.Errorf("%d WATCHDOG=1 in 1.5s with WATCHDOG_USEC=400000, want about 7", k)
	} else {
		t.Logf("%d WATCHDOG=1 in 1.5s", k)
	}

	// Reload: the route body changes.
	writeOpsFile(t, dir, "127.0.0.1:0", "two\n", "workers {\n  count = 2\n}\n")
	p.cmd.Process.Signal(syscall.SIGHUP)
	m := ns.expect(t, "RELOADING=1", 10*time.Second)
	if !strings.Contains(m, "MONOTONIC_USEC=") {
		t.Errorf("RELOADING=1 without MONOTONIC_USEC: %q", m)
	}
	if hasLine(m, "READY=1") {
		t.Errorf("RELOADING=1 and READY=1 in one message: %q", m)
	}
	m = ns.expect(t, "READY=1", 20*time.Second)
	if st := statusOf(m); !strings.HasPrefix(st, "serving on") {
		t.Errorf("STATUS after reload: %q", st)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, body := opsGet(t, p.addr, "/v"); body == "two\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("route body did not change after SIGHUP")
		}
		time.Sleep(50 * time.Millisecond)
	}

	p.cmd.Process.Signal(syscall.SIGTERM)
	m = ns.expect(t, "STOPPING=1", 10*time.Second)
	if st := statusOf(m); !strings.HasPrefix(st, "stopping") {
		t.Errorf("STATUS with STOPPING=1: %q", st)
	}
	if code := p.waitExit(t, 20*time.Second); code != 0 {
		t.Errorf("exit status %d after SIGTERM, want 0", code)
	}
}

// WATCHDOG_PID naming another process: the watchdog is not ours to ping.
func TestOpsSystemdWatchdogOtherPID(t *testing.T) {
	dir := writeOpsConfig(t, "127.0.0.1:0", "workers {\n  count = 1\n}\n")
	ns := newNotifySocket(t)
	startOps(t, dir, opsOptions{
		args: []string{"-config", "gatehouse.hcl"},
		env:  []string{"NOTIFY_SOCKET=" + ns.path, "WATCHDOG_USEC=200000", "WATCHDOG_PID=1"},
	})
	ns.expect(t, "READY=1", 20*time.Second)
	if k := ns.count("WATCHDOG=1", time.Second); k != 0 {
		t.Errorf("%d WATCHDOG=1 with WATCHDOG_PID=1", k)
	}
	for _, m := range ns.history() {
		if hasLine(m, "WATCHDOG=1") {
			t.Fatalf("WATCHDOG=1 sent: %q", ns.history())
		}
	}
}

// listeningFile returns a listening TCP socket's descriptor, to pass to a
// child, and its address.
func listeningFile(t *testing.T) (*os.File, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close() // the file is a duplicate that stays open
	f, err := l.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, l.Addr().String()
}

// Socket activation: gatehouse serves on the socket it is handed as fd 3
// (LISTEN_FDS/LISTEN_PID/LISTEN_FDNAMES) and does not bind the address its
// file configures.
func TestOpsSocketActivation(t *testing.T) {
	t.Run("by name", func(t *testing.T) {
		f, addr := listeningFile(t)
		// The configured address is held by a bound socket that does not
		// listen: had gatehouse tried to bind it, it would exit 3.
		configured := reservedAddr(t)
		dir := writeOpsConfig(t, configured, "workers {\n  count = 1\n}\n")
		p := startOps(t, dir, opsOptions{
			args:      []string{"-config", "gatehouse.hcl"},
			env:       []string{"LISTEN_FDS=1", "LISTEN_FDNAMES=http"},
			fds:       []*os.File{f},
			listenPID: true,
		})
		f.Close() // only gatehouse holds the socket now
		if p.addr != addr {
			t.Fatalf("listening on %s, want the inherited %s", p.addr, addr)
		}
		if !strings.Contains(p.log(), "inherited_fd=3") {
			t.Errorf("no inherited_fd=3 in the log")
		}
		p.waitServing(t, "/ok")
		if code, body := opsGet(t, addr, "/v"); code != 200 || body != "one\n" {
			t.Errorf("GET /v on the inherited socket: %d %q", code, body)
		}
		if c, err := net.DialTimeout("tcp", configured, time.Second); err == nil {
			c.Close()
			t.Errorf("something listens on the configured %s: gatehouse bound it", configured)
		}
		p.cmd.Process.Signal(syscall.SIGTERM)
		if code := p.waitExit(t, 20*time.Second); code != 0 {
			t.Errorf("exit status %d", code)
		}
	})
	t.Run("by address", func(t *testing.T) {
		f, addr := listeningFile(t)
		dir := writeOpsConfig(t, addr, "workers {\n  count = 1\n}\n")
		// No LISTEN_FDNAMES: the socket's address matches the listener. The
		// test still holds the port through f, so binding it would fail.
		p := startOps(t, dir, opsOptions{
			args:      []string{"-config", "gatehouse.hcl"},
			env:       []string{"LISTEN_FDS=1"},
			fds:       []*os.File{f},
			listenPID: true,
		})
		p.waitServing(t, "/ok")
		if !strings.Contains(p.log(), "inherited_fd=3") {
			t.Errorf("no inherited_fd=3 in the log")
		}
	})
	t.Run("unmatched", func(t *testing.T) {
		f, _ := listeningFile(t)
		dir := writeOpsConfig(t, opsFreeAddr(t), "")
		p := startOps(t, dir, opsOptions{
			args:      []string{"-config", "gatehouse.hcl"},
			env:       []string{"LISTEN_FDS=1", "LISTEN_FDNAMES=https"},
			fds:       []*os.File{f},
			listenPID: true,
			noWait:    true,
		})
		if code := p.waitExit(t, 20*time.Second); code != 3 {
			t.Errorf("exit status %d, want 3", code)
		}
		if !strings.Contains(p.log(), "matches no listener") {
			t.Errorf("log does not explain the mismatch:\n%s", p.log())
		}
	})
	t.Run("other pid", func(t *testing.T) {
		// LISTEN_PID of another process: the descriptors are not ours,
		// and gatehouse binds its configured address.
		f, _ := listeningFile(t)
		dir := writeOpsConfig(t, "127.0.0.1:0", "workers {\n  count = 1\n}\n")
		p := startOps(t, dir, opsOptions{
			args: []string{"-config", "gatehouse.hcl"},
			env:  []string{"LISTEN_FDS=1", "LISTEN_FDNAMES=http", "LISTEN_PID=1"},
			fds:  []*os.File{f},
		})
		p.waitServing(t, "/ok")
		if strings.Contains(p.log(), "inherited_fd") {
			t.Errorf("adopted a socket meant for another process")
		}
	})
}

// reservedAddr returns a loopback address held by a bound socket that does
// not listen (and has no SO_REUSEADDR): nothing can bind it, and connecting
// to it is refused.
func reservedAddr(t *testing.T) string {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", sa.(*unix.SockaddrInet4).Port)
}
