package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/view"
	"golang.org/x/sys/unix"
)

// testHandlers are handlers built only into this test binary's workers.
func testHandlers() map[string]http.Handler {
	return map[string]http.Handler{"attack": http.HandlerFunc(attack), "echo": http.HandlerFunc(echoHandler),
		"bytes": http.HandlerFunc(bytesHandler), "tlsinfo": http.HandlerFunc(tlsInfo), "sized": http.HandlerFunc(sizedHandler)}
}

// testHandlerNames are the names of testHandlers, for the configuration's
// check of embedded blocks.
func testHandlerNames() []string {
	var names []string
	for name := range testHandlers() {
		names = append(names, name)
	}
	return names
}

// attack tries what a compromised worker would, as named by ?try=, and
// reports the errno when it survives.
func attack(w http.ResponseWriter, r *http.Request) {
	var err error
	switch r.URL.Query().Get("try") {
	case "socket":
		var fd int
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
		if err == nil {
			unix.Close(fd)
		}
	case "connect":
		var c net.Conn
		c, err = net.Dial("tcp", r.URL.Query().Get("addr"))
		if err == nil {
			c.Close()
		}
	case "exec":
		err = syscall.Exec("/bin/sh", []string{"sh", "-c", "true"}, nil)
	case "open":
		var f *os.File
		f, err = os.Open("/etc/passwd")
		if err == nil {
			f.Close()
		}
	case "read":
		var f *os.File
		f, err = os.Open(r.URL.Query().Get("path"))
		if err == nil {
			f.Close()
		}
	case "write":
		var f *os.File
		f, err = os.OpenFile(r.URL.Query().Get("path"), os.O_WRONLY|os.O_CREATE, 0o644)
		if err == nil {
			f.Close()
		}
	}
	var errno syscall.Errno
	switch {
	case err == nil:
		fmt.Fprintln(w, "SUCCEEDED")
	case errors.As(err, &errno):
		fmt.Fprintln(w, unix.ErrnoName(errno))
	default:
		fmt.Fprintln(w, "error:", err)
	}
}

func sandboxConfig(www string) string {
	return fmt.Sprintf(`
workers {
  count       = 2
  concurrency = 4
}
route "/" {
  static {
    root = %q
  }
}
route "/ok" {
  respond {
    body = "ok\n"
  }
}
route "/hold" {
  request_buffering = false
  respond {
    body = "held\n"
  }
}
route "/attack" {
  embedded {
    name = "attack"
  }
}
`, www)
}

// holdRequest holds its connection at a worker until one more byte is sent:
// its handler streams a body (request_buffering = false) that has not come.
// A slow head would not: the dispatcher holds incomplete heads.
const holdRequest = "POST /hold HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n"

func docRoot(t testing.TB) string {
	dir := workerReadableTempDir(t)
	www := filepath.Join(dir, "www")
	os.MkdirAll(www, 0o755)
	os.WriteFile(filepath.Join(www, "index.html"), []byte("<h1>sandboxed</h1>\n"), 0o644)
	return www
}

// The live worker, read from /proc and not from its own report: seccomp,
// no_new_privs, an unprivileged uid and gid, its own namespaces, the chroot
// as its root, and only the descriptors it needs.
func TestSandboxLiveWorker(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the full sandbox is checked when started as root")
	}
	www := docRoot(t)
	h := start(t, sandboxConfig(www))
	// Hold one client connection at a worker: a streamed body not sent.
	c := dialFrom(t, "127.0.0.2", h.addr)
	defer c.Close()
	fmt.Fprint(c, holdRequest)
	s := h.waitFor("a connection at a worker", 10*time.Second, func(s view.Snapshot) bool { return s.AtWorkers == 1 })
	var w view.WorkerInfo
	for _, wi := range s.Workers {
		if wi.Active == 1 {
			w = wi
		}
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", w.PID))
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]string{}
	for _, line := range strings.Split(string(status), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = strings.TrimSpace(v)
		}
	}
	if fields["Seccomp"] != "2" || fields["NoNewPrivs"] != "1" {
		t.Errorf("Seccomp %q NoNewPrivs %q, want 2 and 1", fields["Seccomp"], fields["NoNewPrivs"])
	}
	for _, k := range []string{"Uid", "Gid"} {
		for _, id := range strings.Fields(fields[k]) {
			if id == "0" {
				t.Errorf("%s %q holds 0", k, fields[k])
			}
		}
	}
	if fields["CapEff"] != "0000000000000000" {
		t.Errorf("CapEff %s", fields["CapEff"])
	}
	for _, ns := range []string{"net", "mnt", "pid", "user"} {
		mine, _ := os.Readlink("/proc/self/ns/" + ns)
		theirs, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", w.PID, ns))
		if err != nil || mine == theirs {
			t.Errorf("namespace %s: worker %q, supervisor %q (%v)", ns, theirs, mine, err)
		}
	}
	// Its root is an empty read-only tmpfs holding only the way down to
	// the document root.
	var fs unix.Statfs_t
	if err := unix.Statfs(fmt.Sprintf("/proc/%d/root/", w.PID), &fs); err != nil || fs.Type != unix.TMPFS_MAGIC || fs.Flags&unix.ST_RDONLY == 0 {
		t.Errorf("worker root: statfs type %#x flags %#x (%v), want a read-only tmpfs", fs.Type, fs.Flags, err)
	}
	top := strings.Split(strings.TrimPrefix(www, "/"), "/")[0]
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/root/", w.PID)); err != nil || len(ents) != 1 || ents[0].Name() != top {
		t.Errorf("worker root lists %v (%v), want only %q", ents, err, top)
	}
	// Descriptors: 0–3, the client connection it serves, the document root
	// it opened before the sandbox, its access log pipe, and the Go runtime's
	// own: its poller (an epoll instance and its wake-up eventfd) and the
	// cgroup CPU limit files it opens at start to size GOMAXPROCS. Nothing
	// else.
	fdDir := fmt.Sprintf("/proc/%d/fd", w.PID)
	// The supervisor counts the connection at the worker once it sent it;
	// the worker may not have received it yet.
	var ents []os.DirEntry
	for i := 0; i < 250; i++ {
		if ents, err = os.ReadDir(fdDir); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range ents {
			if target, _ := os.Readlink(filepath.Join(fdDir, e.Name())); strings.HasPrefix(target, "socket:") {
				n++
			}
		}
		if n >= 2 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The access log: the write end of a pipe, never the file.
	accessPipe := h.accessLog != ""
	sockets := 0
	for _, e := range ents {
		target, _ := os.Readlink(filepath.Join(fdDir, e.Name()))
		switch {
		case e.Name() == "0" || e.Name() == "1" || e.Name() == "2":
		case accessPipe && strings.HasPrefix(target, "pipe:"):
			accessPipe = false // one descriptor only
		case strings.HasPrefix(target, "socket:"):
			sockets++
		// The cgroup files were opened before the old root was detached,
		// so they read relative to their own mount.
		case target == "anon_inode:[eventpoll]", target == "anon_inode:[eventfd]", strings.HasPrefix(target, "/sys/fs/cgroup/"), strings.HasPrefix(target, "/cpu."):
		case target == www:
			// The root descriptor is the read-only bind in the worker's
			// tree: even unconfined, ".." from it leads nowhere.
			fd := filepath.Join(fdDir, e.Name())
			if f, err := os.Open(fd + "/../../../../../etc/passwd"); err == nil {
				f.Close()
				t.Errorf("%s/../../../../../etc/passwd opened: the root descriptor climbs out of the worker's tree", fd)
			}
			if f, err := os.Open(fd + "/index.html"); err != nil {
				t.Errorf("%s/index.html: %v", fd, err)
			} else {
				f.Close()
			}
		default:
			t.Errorf("worker holds descriptor %s → %s", e.Name(), target)
		}
	}
	// The channel (received as fd 3, re-opened under the runtime's poller
	// at another number) and the one client connection it serves.
	if sockets != 2 {
		t.Errorf("worker holds %d sockets, want 2: its channel and the client connection it serves", sockets)
	}
	fmt.Fprintf(c, "\r\n")
	resp, _, err := readResponse(bufio.NewReader(c), "GET")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the held request: %v", err)
	}
	// The static handler serves from its root under chroot and Landlock.
	cl := newClient(t, "127.0.0.3", h.addr)
	if resp, body, err := cl.get("/"); err != nil || resp.StatusCode != 200 || !strings.Contains(body, "sandboxed") {
		t.Fatalf("static under the sandbox: %v %q %v", resp, body, err)
	}
	for _, l := range w.Sandbox {
		if strings.HasPrefix(l, "-") {
			t.Errorf("layer not applied: %s", l)
		}
	}
}

// A worker that tries what it may not is stopped: killed by seccomp (SIGSYS,
// logged with the signal, replaced) or refused with an errno; the other
// worker's clients are served throughout.
func TestSandboxAttacks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the full sandbox is checked when started as root")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, tc := range []struct {
		try    string
		errnos []string // acceptable errnos when it is not killed
	}{
		{"socket", nil},
		{"connect&addr=" + ln.Addr().String(), nil},
		{"exec", nil},
		{"open", []string{"ENOENT", "EACCES", "EPERM"}},
		{"write&path=/index.html", nil},
	} {
		t.Run(strings.Split(tc.try, "&")[0], func(t *testing.T) {
			www := docRoot(t)
			h := start(t, sandboxConfig(www))
			before := h.snapshot()
			// Another client, served throughout.
			stop := make(chan struct{})
			served := make(chan error, 1)
			go func() {
				cl := newClient(t, "127.0.0.3", h.addr)
				for i := 0; ; i++ {
					select {
					case <-stop:
						served <- nil
						return
					default:
					}
					resp, _, err := cl.get("/ok")
					if err != nil || resp.StatusCode != 200 {
						served <- fmt.Errorf("other client, request %d: %v", i, err)
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
			}()
			cl := newClient(t, "127.0.0.2", h.addr)
			resp, body, err := cl.get("/attack?try=" + tc.try)
			killed := err != nil
			switch {
			case killed:
				h.expectDeaths(1)
				s := h.waitFor("the killed worker's replacement", 20*time.Second, func(s view.Snapshot) bool {
					return s.Counters["worker_deaths"] > before.Counters["worker_deaths"] && settled(2)(s)
				})
				if !strings.Contains(h.logs.String(), "signal 31") {
					t.Errorf("the death was not logged with SIGSYS")
				}
				t.Logf("%s: worker killed by seccomp and replaced (restarts %d)", tc.try, s.Workers[0].Restarts+s.Workers[1].Restarts)
			case resp.StatusCode != 200:
				t.Fatalf("status %d", resp.StatusCode)
			default:
				got := strings.TrimSpace(body)
				ok := false
				for _, e := range tc.errnos {
					ok = ok || got == e
				}
				if !ok {
					t.Fatalf("the attempt was neither killed nor refused with %v: %q", tc.errnos, got)
				}
				t.Logf("%s: refused with %s", tc.try, got)
			}
			close(stop)
			if err := <-served; err != nil {
				t.Error(err)
			}
			if _, err := os.Stat(filepath.Join(www, "index.html.new")); err == nil {
				t.Error("a file appeared in the document root")
			}
		})
	}
}
