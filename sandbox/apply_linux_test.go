package sandbox_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gatehouse-dev/gatehouse/sandbox"
	"github.com/gatehouse-dev/gatehouse/sandbox/sandboxtest"
)

const indexBody = "hello from the root\n"

// makeRoot creates a document root readable by an unprivileged worker.
func makeRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "gatehouse-root-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "index.html"), []byte(indexBody), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// spawnAttr returns the worker SysProcAttr, skipping when the kernel lacks
// a namespace.
func spawnAttr(t *testing.T, p sandbox.Policy) *syscall.SysProcAttr {
	t.Helper()
	attr, _, err := sandbox.SpawnAttr(p)
	if errors.Is(err, sandbox.ErrNotSupported) {
		t.Skipf("namespaces unavailable: %v", err)
	}
	if err != nil {
		t.Fatalf("SpawnAttr: %v", err)
	}
	return attr
}

// startWorker starts this test in a child spawned like a worker, with the
// root as Arg.
func startWorker(t *testing.T, p sandbox.Policy, root string) *sandboxtest.Child {
	t.Helper()
	return sandboxtest.Start(t, sandboxtest.Options{SysProcAttr: spawnAttr(t, p), Arg: root})
}

// childApply runs in the child: it opens the root as the worker does, then
// applies p with the root, skipping when the kernel lacks a layer.
func childApply(t *testing.T, p sandbox.Policy) *os.Root {
	t.Helper()
	root, err := os.OpenRoot(sandboxtest.Arg())
	if err != nil {
		t.Fatalf("OpenRoot: %v", err)
	}
	layers, err := sandbox.Apply(p.WithRoots(sandboxtest.Arg()))
	for _, l := range layers {
		t.Log(l)
	}
	if errors.Is(err, sandbox.ErrNotSupported) {
		t.Skipf("layer unavailable: %v", err)
	}
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return root
}

func procStatus(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok {
			m[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	return m
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestApplyStrict applies the full policy in a worker-like child, checks
// from inside what it can still do, and from outside how it is confined.
func TestApplyStrict(t *testing.T) {
	p := sandbox.Policy{}
	if sandboxtest.InChild() {
		root := childApply(t, p)
		b, err := readRootFile(root, "index.html")
		if err != nil || string(b) != indexBody {
			t.Errorf("ReadFile(index.html) = %q, %v; want %q", b, err, indexBody)
		}
		if _, err := root.Stat("."); err != nil {
			t.Errorf("Stat(.) in root: %v", err)
		}
		if _, err := os.Open("/etc/passwd"); !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EACCES) {
			t.Errorf("Open(/etc/passwd) = %v, want ENOENT or EACCES", err)
		}
		if _, err := root.Open("../../../../etc/passwd"); err == nil {
			t.Errorf("Open(../../etc/passwd) in root succeeded")
		}
		// clone3 is refused with ENOSYS, not by killing.
		if _, _, e := unix.RawSyscall(unix.SYS_CLONE3, 0, 0, 0); e != unix.ENOSYS {
			t.Errorf("clone3 = %v, want ENOSYS", e)
		}
		stressRuntime()
		sandboxtest.Hold()
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: checks the drop to an unprivileged host uid")
	}
	c := startWorker(t, p, makeRoot(t))
	if !c.WaitHold(t) {
		c.Wait(t).Report(t)
		t.Fatal("child ended before holding")
	}
	st := procStatus(t, c.Pid)
	for k, want := range map[string]string{"Seccomp": "2", "NoNewPrivs": "1", "CapEff": "0000000000000000", "CapPrm": "0000000000000000"} {
		if st[k] != want {
			t.Errorf("/proc/PID/status %s = %q, want %q", k, st[k], want)
		}
	}
	for _, k := range []string{"Uid", "Gid"} {
		for _, id := range strings.Fields(st[k]) {
			if id == "0" {
				t.Errorf("/proc/PID/status %s = %q, want no 0", k, st[k])
			}
		}
	}
	for _, ns := range []string{"net", "mnt", "pid", "user", "ipc", "uts"} {
		mine, err1 := os.Readlink("/proc/self/ns/" + ns)
		theirs, err2 := os.Readlink("/proc/" + itoa(c.Pid) + "/ns/" + ns)
		if err1 != nil || err2 != nil || mine == theirs {
			t.Errorf("ns/%s: parent %q (%v), child %q (%v); want different", ns, mine, err1, theirs, err2)
		}
	}
	// The new root is a tmpfs holding only the way down to the root.
	var fs unix.Statfs_t
	if err := unix.Statfs("/proc/"+itoa(c.Pid)+"/root/", &fs); err != nil || fs.Type != unix.TMPFS_MAGIC || fs.Flags&unix.ST_RDONLY == 0 {
		t.Errorf("worker root: statfs type %#x flags %#x (%v), want a read-only tmpfs", fs.Type, fs.Flags, err)
	}
	if ents, err := os.ReadDir("/proc/" + itoa(c.Pid) + "/root/"); err != nil || len(ents) != 1 {
		t.Errorf("worker root contents = %v (%v), want the one directory leading to the document root", ents, err)
	}
	res := c.Wait(t)
	t.Logf("child output:\n%s", res.Output)
	res.Report(t)
}

// stressRuntime makes the runtime do what a busy worker makes it do — new
// threads, GC cycles, scavenging, preemption, timers — so that a call
// missing from the allow-list kills the child.
func stressRuntime() {
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var keep [][]byte
			deadline := time.Now().Add(300 * time.Millisecond)
			for time.Now().Before(deadline) {
				keep = append(keep, make([]byte, 64<<10))
				if len(keep) > 200 {
					keep = nil
					runtime.GC()
					time.Sleep(time.Duration(i) * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	debug.FreeOSMemory()
}

// TestApplyHostRoot starts the child as host root without namespaces (the
// best-effort fallback when user namespaces are unavailable) and checks
// that Apply switches to the unprivileged uid with setresuid, chroots
// instead of pivoting the host's mount namespace, and says so.
func TestApplyHostRoot(t *testing.T) {
	p := sandbox.Policy{}.BestEffort()
	if sandboxtest.InChild() {
		root, err := os.OpenRoot(sandboxtest.Arg())
		if err != nil {
			t.Fatal(err)
		}
		layers, err := sandbox.Apply(p.WithRoots(sandboxtest.Arg()))
		if err != nil {
			t.Fatalf("Apply: %v", err)
		}
		for _, l := range layers {
			t.Log(l)
			if l.Name != "pivot_root" && !l.Applied {
				t.Errorf("layer not applied: %v", l)
			}
		}
		if sandbox.RootsRebound(layers) {
			t.Errorf("pivot_root reported applied without a user namespace")
		}
		if _, err := readRootFile(root, "index.html"); err != nil {
			t.Errorf("ReadFile: %v", err)
		}
		sandboxtest.Hold()
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	c := sandboxtest.Start(t, sandboxtest.Options{Arg: makeRoot(t)})
	if !c.WaitHold(t) {
		c.Wait(t).Report(t)
		t.Fatal("child ended before holding")
	}
	st := procStatus(t, c.Pid)
	for k, want := range map[string]string{"Seccomp": "2", "NoNewPrivs": "1", "Uid": "65534 65534 65534 65534", "Gid": "65534 65534 65534 65534", "Groups": "", "CapEff": "0000000000000000"} {
		if st[k] != want {
			t.Errorf("/proc/PID/status %s = %q, want %q", k, st[k], want)
		}
	}
	c.Wait(t).Report(t)
}

// TestServeReceivedConn runs the worker's round in a sandboxed child: it
// receives a connected TCP socket over a SOCK_SEQPACKET fd 3 (SCM_RIGHTS),
// reads a request through the netpoller and answers from its root.
func TestServeReceivedConn(t *testing.T) {
	p := sandbox.Policy{}
	if sandboxtest.InChild() {
		root := childApply(t, p)
		buf, oob := make([]byte, 64), make([]byte, unix.CmsgSpace(4*4))
		_, oobn, _, _, err := unix.Recvmsg(3, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err != nil {
			t.Fatalf("recvmsg: %v", err)
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) != 1 {
			t.Fatalf("control messages: %v, %v", msgs, err)
		}
		fds, err := unix.ParseUnixRights(&msgs[0])
		if err != nil || len(fds) != 1 {
			t.Fatalf("rights: %v, %v", fds, err)
		}
		unix.SetNonblock(fds[0], true)
		conn := os.NewFile(uintptr(fds[0]), "conn") // pollable: reads park in epoll
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		req := make([]byte, 128)
		n, err := conn.Read(req)
		if err != nil || !strings.HasPrefix(string(req[:n]), "GET /index.html") {
			t.Fatalf("read request = %q, %v", req[:n], err)
		}
		body, err := readRootFile(root, "index.html")
		if err != nil {
			t.Fatalf("ReadFile: %v", err)
		}
		if _, err := conn.Write(append([]byte("HTTP/1.1 200 OK\r\n\r\n"), body...)); err != nil {
			t.Fatalf("write response: %v", err)
		}
		return
	}
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ipc := os.NewFile(uintptr(sp[1]), "ipc")
	defer unix.Close(sp[0])
	client, server := tcpPair(t)
	c := sandboxtest.Start(t, sandboxtest.Options{SysProcAttr: spawnAttr(t, p), Arg: makeRoot(t), ExtraFiles: []*os.File{ipc}})
	ipc.Close()
	if err := unix.Sendmsg(sp[0], []byte("conn"), unix.UnixRights(server), nil, 0); err != nil {
		t.Fatal(err)
	}
	unix.Close(server)
	if _, err := unix.Write(client, []byte("GET /index.html HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	res := c.Wait(t)
	res.Report(t)
	got := make([]byte, 256)
	n, _ := unix.Read(client, got)
	if want := "HTTP/1.1 200 OK\r\n\r\n" + indexBody; string(got[:n]) != want {
		t.Errorf("response = %q, want %q", got[:n], want)
	}
}

// tcpPair returns the two ends of a loopback TCP connection, made with raw
// system calls so that the test binary does not link net (and thus cgo).
func tcpPair(t *testing.T) (client, server int) {
	t.Helper()
	ln, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ln)
	if err := unix.Bind(ln, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(ln, 1); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(ln)
	if err != nil {
		t.Fatal(err)
	}
	client, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(client) })
	if err := unix.Connect(client, sa); err != nil {
		t.Fatal(err)
	}
	server, _, err = unix.Accept4(ln, unix.SOCK_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	return client, server
}

// readRootFile reads a file below root as a worker does, opened with
// O_NONBLOCK: opened without, the os package clears the flag again once the
// poller refuses the file, and the filter kills a worker that clears it.
func readRootFile(root *os.Root, name string) ([]byte, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// TestSeccompKills checks that each forbidden call kills the worker with
// SIGSYS, each in its own child.
func TestSeccompKills(t *testing.T) {
	tests := []struct {
		name string
		call func(root *os.Root)
	}{
		{"socket", func(*os.Root) { unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0) }},
		{"socketpair", func(*os.Root) { unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0) }},
		{"execve", func(*os.Root) { syscall.Exec("/bin/sh", []string{"sh", "-c", "true"}, nil) }},
		{"create in root", func(r *os.Root) { r.Create("new.txt") }},
		{"open for writing", func(*os.Root) { unix.Open("/x", unix.O_WRONLY, 0) }},
		{"fork", func(*os.Root) { unix.RawSyscall6(unix.SYS_CLONE, uintptr(unix.SIGCHLD), 0, 0, 0, 0, 0) }},
		{"thread in new namespace", func(*os.Root) {
			unix.RawSyscall6(unix.SYS_CLONE, unix.CLONE_THREAD|unix.CLONE_SIGHAND|unix.CLONE_VM|unix.CLONE_NEWNET, 0, 0, 0, 0, 0)
		}},
		{"kill other pid", func(*os.Root) { unix.Kill(os.Getpid()+1, 0) }},
		{"setuid", func(*os.Root) { unix.RawSyscall(unix.SYS_SETUID, 0, 0, 0) }},
		{"chroot", func(*os.Root) { unix.Chroot("/") }},
		{"ioctl", func(*os.Root) { unix.IoctlGetInt(0, unix.TIOCGPGRP) }},
		{"mprotect exec", func(*os.Root) { unix.RawSyscall(unix.SYS_MPROTECT, 0, 4096, unix.PROT_READ|unix.PROT_EXEC) }},
		{"ptrace", func(*os.Root) { unix.RawSyscall(unix.SYS_PTRACE, unix.PTRACE_TRACEME, 0, 0) }},
		{"clear O_NONBLOCK", func(*os.Root) {
			var p [2]int
			unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC)
			unix.SetNonblock(p[0], false)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if sandboxtest.InChild() {
				root := childApply(t, sandbox.Policy{})
				tt.call(root)
				t.Errorf("%s returned under a kill-process filter", tt.name)
				return
			}
			res := startWorker(t, sandbox.Policy{}, makeRoot(t)).Wait(t)
			if strings.Contains(res.Output, "--- SKIP") {
				res.Report(t)
			}
			if res.Signal != syscall.SIGSYS {
				t.Errorf("child ended with signal %v exit %d, want SIGSYS; output:\n%s", res.Signal, res.ExitCode, res.Output)
			}
		})
	}
}

// TestSeccompLog checks diagnosis mode: strict mode refuses it, and in
// best-effort mode the seccomp layer is reported as not enforcing while
// forbidden calls go through the filter (and are logged) and the other
// layers still stop them.
func TestSeccompLog(t *testing.T) {
	if err := (sandbox.Policy{}).WithSeccompAction(sandbox.Log).Validate(); err == nil || !strings.Contains(err.Error(), "strict") {
		t.Errorf("strict policy with seccomp action log: Validate = %v, want a refusal", err)
	}
	if _, err := sandbox.ParseArgs([]string{"-sandbox.mode=strict", "-sandbox.seccomp=log"}); err == nil {
		t.Errorf("ParseArgs accepted strict mode with seccomp action log")
	}
	p := sandbox.Policy{}.BestEffort().WithSeccompAction(sandbox.Log)
	if sandboxtest.InChild() {
		root, err := os.OpenRoot(sandboxtest.Arg())
		if err != nil {
			t.Fatalf("OpenRoot: %v", err)
		}
		layers, err := sandbox.Apply(p.WithRoots(sandboxtest.Arg()))
		if err != nil {
			t.Fatalf("Apply: %v", err)
		}
		for _, l := range layers {
			if l.Name == "seccomp" && (l.Applied || !strings.Contains(l.Detail, "does not enforce")) {
				t.Errorf("seccomp layer in log mode = %v, want not applied, not enforcing", l)
			}
		}
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
		if err != nil {
			t.Errorf("socket in log mode: %v, want a socket", err)
		} else {
			unix.Close(fd)
		}
		if f, err := root.Create("new.txt"); !errors.Is(err, unix.EACCES) {
			t.Errorf("Create in root = %v, %v; want EACCES from Landlock", f, err)
		}
		if _, err := os.Open("/etc/passwd"); !errors.Is(err, unix.ENOENT) {
			t.Errorf("Open(/etc/passwd) = %v, want ENOENT", err)
		}
		return
	}
	startWorker(t, p, makeRoot(t)).Wait(t).Report(t)
}

// TestSeccompPolicy checks that the filter assembles for this architecture.
func TestSeccompPolicy(t *testing.T) {
	for _, a := range []sandbox.SeccompAction{sandbox.Kill, sandbox.Log} {
		pol := sandbox.SeccompPolicy(a, 1)
		if _, err := pol.Assemble(); err != nil {
			t.Errorf("Assemble(%v): %v", a, err)
		}
	}
}

// TestPivotRootWithoutLandlock shows that the worker's filesystem holds
// without Landlock: after Apply, each document root descriptor the worker
// reopens sits in an empty read-only tmpfs, and "../../etc/passwd" relative
// to it finds nothing.
func TestPivotRootWithoutLandlock(t *testing.T) {
	p := sandbox.WithoutLandlock(sandbox.Policy{}.BestEffort())
	if sandboxtest.InChild() {
		roots := strings.Split(sandboxtest.Arg(), ":")
		var before []int
		for _, r := range roots {
			fd, err := unix.Open(r, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			before = append(before, fd)
		}
		layers, err := sandbox.Apply(p.WithRoots(roots...))
		for _, l := range layers {
			t.Log(l)
		}
		if err != nil {
			t.Fatalf("Apply: %v", err)
		}
		if !sandbox.RootsRebound(layers) {
			t.Skip("pivot_root layer not applied")
		}
		for _, l := range layers {
			if l.Name == "landlock" && l.Applied {
				t.Fatalf("landlock applied; the test needs it off")
			}
		}
		for i, r := range roots {
			// What a worker that kept its old descriptor could reach:
			// the reason it must reopen its roots.
			if fd, err := unix.Openat(before[i], "../../etc/passwd", unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
				t.Logf("descriptor of %s opened before Apply still reaches ../../etc/passwd (closed by the worker)", r)
				unix.Close(fd)
			}
			unix.Close(before[i])
			fd, err := unix.Open(r, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatalf("reopening %s after Apply: %v", r, err)
			}
			for _, up := range []string{"../etc/passwd", "../../etc/passwd", "../../../../../../../etc/passwd", "../../proc/1/environ"} {
				if got, err := unix.Openat(fd, up, unix.O_RDONLY|unix.O_CLOEXEC, 0); !errors.Is(err, unix.ENOENT) {
					t.Errorf("openat(root %s, %q) = %d, %v; want ENOENT", r, up, got, err)
				}
			}
			idx, err := unix.Openat(fd, "index.html", unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Errorf("openat(root %s, index.html): %v", r, err)
				continue
			}
			b := make([]byte, 64)
			n, _ := unix.Read(idx, b)
			if string(b[:n]) != indexBody {
				t.Errorf("index.html of %s = %q", r, b[:n])
			}
		}
		if _, err := os.Stat("/etc/passwd"); !errors.Is(err, unix.ENOENT) {
			t.Errorf("Stat(/etc/passwd) = %v, want ENOENT", err)
		}
		sandboxtest.Hold()
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: the worker's uid 0 maps to nobody")
	}
	r1, r2 := makeRoot(t), makeRoot(t)
	c := sandboxtest.Start(t, sandboxtest.Options{SysProcAttr: spawnAttr(t, p), Arg: r1 + ":" + r2})
	if !c.WaitHold(t) {
		c.Wait(t).Report(t)
		t.Fatal("child ended before holding")
	}
	// The worker's root holds only the way down to its document roots.
	ents, err := os.ReadDir("/proc/" + itoa(c.Pid) + "/root/")
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if top := strings.Split(strings.TrimPrefix(r1, "/"), "/")[0]; err != nil || len(names) != 1 || names[0] != top {
		t.Errorf("worker root lists %v (%v), want only %q", names, err, top)
	}
	res := c.Wait(t)
	t.Logf("child output:\n%s", res.Output)
	res.Report(t)
}
